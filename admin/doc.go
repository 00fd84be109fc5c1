// Package admin is an http.Handler of the operator's controls over named
// limiters: see one key's state, put a key back to full capacity, or give
// a key extra requests, through core.Limiter's Inspect, Reset and Grant.
//
// SECURITY: the handler has NO authentication or authorization of its
// own. Anyone who reaches it can reset or raise any client's limits. Mount
// it behind the application's authentication and authorization, ideally
// on an internal listener only:
//
//	ops, err := admin.New(map[string]*core.Limiter{"api": api, "login": login})
//	// handle err: an empty map, a nil limiter or a bad name
//	internal.Handle("/admin/ratekit/", requireOperator(ops)) // requireOperator: your auth middleware
//
// The model: the operator names a limiter (a name given to New) and a
// client key, the key the middleware limits by (an IP, an API key, a user
// ID). Responses never hold the key, only its core.KeyHash, the hash by
// which ratekit's logs name keys; the handler never lists keys. Every
// reset and grant is logged by the limiter, with the operator's reason.
//
// A route is chosen by the last element of the request's path, so the
// handler works under any prefix, with or without http.StripPrefix, and
// behind routers that pass the full path (Chi's Mount, gin.WrapH,
// echo.WrapHandler, Fiber's adaptor):
//
//	GET  …/limiters                      {"limiters": [names, sorted]}
//	GET  …/state?limiter=NAME&key=KEY    the key's state (HEAD too)
//	POST …/reset  {"limiter","key","reason"}           {"limiter","key_hash","found"}
//	POST …/grant  {"limiter","key","amount","reason"}  {"limiter","key_hash","amount","state"}
//
// A state is {"limiter", "key_hash", "tracked", "decision", "limits"}:
// what the key's next request of cost 1 would get, nothing counted, by
// the most restrictive limit and by each limit, with its grant; as in
// the rate-limit headers of that request, "remaining" is what would be
// left after it. Durations are seconds, as JSON numbers (1.5).
//
// POST bodies must be application/json (which also stops cross-site HTML
// forms), at most 64 KiB, with no other fields; the query is not read. A
// reason is optional, at most 500 bytes. A refusal is {"error": fixed
// words} with status 400, 404, 405 (with Allow), 413, 415, 500 (the
// limiter's plan function failed) or 503 (the store failed; Retry-After:
// 1); the handler logs the last two (WithLogger). A grant answers 200
// once given, with a null state if the store then fails to report it.
//
//	curl -s -H "Authorization: Bearer $TOKEN" \
//	    'https://ops.internal/admin/ratekit/state?limiter=api&key=203.0.113.7'
//	curl -s -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/json' \
//	    -d '{"limiter":"api","key":"203.0.113.7","amount":50,"reason":"ticket 4711"}' \
//	    https://ops.internal/admin/ratekit/grant
package admin
