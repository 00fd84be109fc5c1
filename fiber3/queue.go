package ratekitfiber3

import (
	"github.com/gofiber/fiber/v3"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/queue"
)

// WithQueue answers rejected requests by queueing them for later (see
// package queue): 202 Accepted with the item's ID; the rejection as
// without a queue when the queue is full or failing; 413 when the body is
// over the offer's bound (Fiber has read the body already, up to the
// app's BodyLimit). It is a denied handler (WithDeniedHandler) that hands
// the request to offer.Reply, and replaces any other; a nil offer leaves
// the default.
func WithQueue(offer *queue.Offer) Option {
	if offer == nil {
		return WithDeniedHandler(nil)
	}
	return WithDeniedHandler(func(c fiber.Ctx, d core.Decision) error {
		req := c.Request()
		rep := offer.Reply(c.Context(), &queue.Request{Method: req.Header.Method(), URI: req.RequestURI(),
			Header: req.Header.PeekAll, Body: req.Body()}, d)
		rep.Fields(c.Response().Header.Set, c.Response().Header.Del)
		return c.Status(rep.Status).Send(rep.Body)
	})
}
