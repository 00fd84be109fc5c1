package adapter

import (
	"log/slog"

	"github.com/ratekit/ratekit/answer"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/queue"
)

// The options below set one field of a Config each. An adapter whose
// handlers take its request type C as they are returns them from its own
// With functions; one whose handlers take other types (a net/http
// adapter's take the writer and the request) converts its handlers first.

// WithSkipper sets Config.Skip.
func WithSkipper[C any](skip func(C) bool) Option[C] {
	return func(c *Config[C]) { c.Skip = skip }
}

// WithCost sets Config.Cost.
func WithCost[C any](cost func(C) int) Option[C] {
	return func(c *Config[C]) { c.Cost = cost }
}

// WithDeniedHandler sets Config.Denied, in place of any queue (WithQueue).
func WithDeniedHandler[C any](denied func(C, core.Decision) error) Option[C] {
	return func(c *Config[C]) { c.Denied, c.Queue = denied, nil }
}

// WithQueue sets Config.Queue, in place of any denied handler.
func WithQueue[C any](offer *queue.Offer) Option[C] {
	return func(c *Config[C]) { c.Denied, c.Queue = nil, offer }
}

// WithErrorHandler sets Config.OnError.
func WithErrorHandler[C any](onError func(C, error) error) Option[C] {
	return func(c *Config[C]) { c.OnError = onError }
}

// WithHeaders sets Config.Headers.
func WithHeaders[C any](s answer.Style) Option[C] {
	return func(c *Config[C]) { c.Headers = s }
}

// WithLogger sets Config.Logger.
func WithLogger[C any](log *slog.Logger) Option[C] {
	return func(c *Config[C]) { c.Logger = log }
}

// WithDecisionInContext sets Config.DecisionInContext.
func WithDecisionInContext[C any]() Option[C] {
	return func(c *Config[C]) { c.DecisionInContext = true }
}
