// Package core decides whether a request may proceed. It knows nothing of
// HTTP: the middleware packages (stdhttp and the framework adapters) turn
// its decisions into responses, through package answer.
//
// The model, in four words: limit, algorithm, store, decision.
//
//   - A [Limit] is a policy: a [Rate] (100 per minute), an [Algorithm]
//     (token bucket, leaky bucket, fixed window, sliding window log or
//     counter) and, for buckets, a burst. A count of 0 blocks everything.
//   - A [Limiter] holds one or more limits, bound in a [Store]: the
//     [MemoryStore] of this process (the default), or Redis
//     (package redisstore) to share limits between servers.
//   - [Limiter.Take] decides a request of some cost for a key (a client
//     IP, an API key, a user) by every limit at once, all or nothing:
//     admitted only if every limit admits it, and then counted by every
//     limit; otherwise counted by none. [TakeAll] does the same over
//     several limiters, each with its own key, such as the rules of a
//     rules file that match one request.
//   - The [Decision] says whether the request is allowed and, truthfully,
//     how many more would be (Remaining), when the key is back to its full
//     quota (ResetAfter) and when a rejected request would be admitted
//     (RetryAfter).
//
// A rejection is not an error: an error means the key was unusable (empty:
// [ErrMissingKey]), the cost impossible ([ErrCostExceedsLimit]) or the
// store failed, and then the decision follows the limiter's fail mode: open
// (admitted) by default, closed with [WithFailClosed].
//
//	lim, err := core.NewLimiter(core.Limit{Algorithm: core.TokenBucket, Rate: core.PerMinute(100)},
//		core.WithLimit(core.Limit{Name: "hourly", Algorithm: core.FixedWindow, Rate: core.PerHour(1000)}))
//	if err != nil {
//		return err // a bad limit is an error, never a panic
//	}
//	d, err := lim.Take(ctx, clientIP, 1)
//	if !d.Allowed {
//		// reject; retry in d.RetryAfter
//	}
//
// Observers ([WithObserver]) see every limit's decision as an [Event], for
// metrics; [WithShadow] counts without rejecting, to roll a limit out;
// [WithSoftPercent] admits a margin over the limit, marked Soft.
//
// [NewPlanLimiter] chooses the limit per request, from the client's key:
// free and paid plans. An operator acts on one key of any limiter, in any
// store: [Limiter.Inspect] (its state, nothing counted), [Limiter.Reset]
// (back to full capacity) and [Limiter.Grant] (extra requests, used before
// the limits count); package admin serves them over HTTP.
package core
