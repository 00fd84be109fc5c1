package adapter

import (
	"context"

	"github.com/ratekit/ratekit/core"
)

// ContextWithDecision returns a copy of ctx that carries d, for a port
// whose framework keeps a request's values in its context (net/http,
// gRPC): its Keep. It costs one allocation, where context.WithValue of a
// pointer to the decision would take two. DecisionFromContext reads it.
func ContextWithDecision(ctx context.Context, d core.Decision) context.Context {
	return &decisionContext{ctx, d}
}

// DecisionFromContext returns the decision that ContextWithDecision put
// in ctx, or in a context derived from it: the body of such an adapter's
// DecisionFrom. Under several middlewares that kept one, it is the
// decision of the one that ran last.
func DecisionFromContext(ctx context.Context) (core.Decision, bool) {
	return Kept(ctx.Value(decisionKey{}))
}

type decisionKey struct{}

// decisionContext is a context that carries a decision.
type decisionContext struct {
	context.Context
	d core.Decision
}

func (c *decisionContext) Value(key any) any {
	if key == (decisionKey{}) {
		return &c.d
	}
	return c.Context.Value(key)
}
