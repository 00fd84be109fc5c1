package ratekitgin

import (
	"github.com/gin-gonic/gin"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/queue"
)

// WithQueue answers rejected requests by queueing them for later (see
// package queue): 202 Accepted with the item's ID; the rejection as
// without a queue when the queue is full or failing; 413 when the body is
// over the offer's bound. It is a denied handler (WithDeniedHandler) that
// serves c.Writer and c.Request with offer.ServeDenied, and replaces any
// other; a nil offer leaves the default.
func WithQueue(offer *queue.Offer) Option {
	if offer == nil {
		return WithDeniedHandler(nil)
	}
	return WithDeniedHandler(func(c *gin.Context, d core.Decision) { offer.ServeDenied(c.Writer, c.Request, d) })
}
