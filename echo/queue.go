package ratekitecho

import (
	"github.com/labstack/echo/v4"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/queue"
)

// WithQueue answers rejected requests by queueing them for later (see
// package queue): 202 Accepted with the item's ID; the rejection as
// without a queue when the queue is full or failing; 413 when the body is
// over the offer's bound. It sets Config.DeniedHandler to serve
// c.Response() and c.Request() with offer.ServeDenied; a nil offer leaves
// the default.
func WithQueue(offer *queue.Offer) Option {
	if offer == nil {
		return WithDeniedHandler(nil)
	}
	return WithDeniedHandler(func(c echo.Context, d core.Decision) error {
		offer.ServeDenied(c.Response(), c.Request(), d)
		return nil
	})
}
