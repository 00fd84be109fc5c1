package ratekitchi

import (
	"github.com/ratekit/ratekit/queue"
	"github.com/ratekit/ratekit/stdhttp"
)

// WithQueue answers rejected requests by queueing them for later (see
// package queue): 202 Accepted with the item's ID; the rejection as
// without a queue when the queue is full or failing; 413 when the body is
// over the offer's bound. It is stdhttp.WithQueue.
func WithQueue(offer *queue.Offer) Option { return stdhttp.WithQueue(offer) }
