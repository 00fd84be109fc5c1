// Package rules decides requests by rate-limit rules kept as data: a
// config in the schema of the Envoy rate-limit service (envoyproxy/ratelimit),
// loaded from a file by package rulesfile or built in Go, and replaced
// while the server runs, without losing counts.
//
// # Descriptors
//
// A Config is a domain and a tree of descriptors. Each descriptor names a
// descriptor key, the piece of request data it looks at, and optionally a
// value. Files and configs mean what they mean to Envoy's service:
//
//   - Among sibling descriptors with the same key (and the same Match),
//     the one whose value equals the request's value applies, else the
//     first in file order whose value holds a "*" that matches it (a "*"
//     anywhere stands for any run of characters: "files/*", "bar*b"),
//     else the one without a value. A request without a value for a key
//     (a missing header, an anonymous user) matches no descriptor with
//     that key, as an Envoy proxy sends no entry for it.
//   - A request's descriptor ends at the deepest descriptor its data
//     reaches on each path down the tree, and the rate limit there
//     applies, not those of its ancestors: a parent's limit applies to a
//     request only when none of its children matches. A path that ends at
//     a descriptor without a rate limit gets none. Sibling keys are
//     separate paths, each with its own limit.
//   - A wildcard descriptor counts each value it matches apart, unless it
//     has share_threshold: then every value it matches shares one counter.
//
// Every rate limit that applies must admit the request; the response
// headers describe the most restrictive one. A rate limit with Replaces
// suppresses the named limits when both apply. A rate limit of zero
// requests rejects every request it applies to (a block list entry), and
// an unlimited one applies none, to exempt specific values.
//
// Engine.Lookup answers for a descriptor given as Envoy's list of entries
// exactly as Envoy's service does (an empty value, which a request cannot
// send, selects the descriptor without a value there); the project's
// tests run Envoy's own config test cases against it.
//
// The built-in descriptor keys are:
//
//	remote_address  the client IP address (or IPv6 prefix), as keyfuncs.IP
//	                finds it: the TCP peer unless trusted proxies are
//	                configured (WithClientIP)
//	generic_key     no request data: matches every request; with a value,
//	                that value only names the limit. With Match, it gives
//	                a limit shared by all requests to a route. (In Envoy,
//	                each route sends its own generic_key value, so a file
//	                with several generic_key values for different routes
//	                needs a Match on each here, or every request gets
//	                every one of those limits.)
//	header:NAME     the first non-blank value of header NAME
//	query:NAME      the first value of query parameter NAME
//	user            the user ID the application stored for the request
//	                (WithUserKey)
//	route           the method and route pattern, "GET /items/{id}" (the
//	                cleaned path when the router has not told the pattern)
//	path            the cleaned request path
//	method          the request method
//
// Applications register their own keys with WithKey, such as "plan" from
// their auth layer; a config that uses an unknown key is rejected.
//
// Header and query values are chosen by the client, who can dodge a limit
// keyed by them alone by inventing values: validate them before the
// middleware, or give remote_address a limit beside them (a sibling path
// applies too) or above them with Cascade. The value of
// remote_address for an IPv6 client is its prefix in CIDR notation
// ("2001:db8:1:2::/64" with the default prefix length), which is what a
// descriptor value must say to block or exempt it.
//
// # Counters and reloads
//
// Each rate limit becomes a limit of package core named after its identity:
// the domain and the descriptor path to it (keys, values and matches), as
// in "auth/remote_address" or "api/plan:premium/header:X-API-Key"; where
// the path holds a match or characters that limit names do not allow, a
// hash of the path keeps names distinct, as in
// "auth/remote_address_POST/login-6c9a98c70eedbad0". The key of a request
// for it is made of the request's values along that path.
// Limits live in the engine's store, so a rule whose identity is unchanged
// by a reload keeps its counters and the new limit applies to them.
//
// # ratekit's extensions
//
// Config.Cascade (cascade: true in a file) applies every rate limit on
// the way down a nested path, each parent's as well as the child's: a
// request must pass all of them.
// Match restricts a descriptor to a method and path pattern. A method GET
// also matches HEAD, which routers serve with the GET handler; a path
// matches if either its unescaped or its escaped form does, since routers
// route by one or the other ("/users/1%2Fx/export" is /users/{id}/export
// to http.ServeMux). RateLimit
// gains Algorithm (default fixed-window, Envoy's), Burst (buckets) and
// SoftPercent (admit that many percent over the limit, flagged with the
// X-Ratelimit-Soft header and reported as core.SoftAllowed). ShadowMode,
// Envoy's own, counts without ever rejecting; a rejection it would have
// made is reported as core.ShadowDenied. Envoy's QuotaMode is decided the
// same way. Envoy's DetailedMetric, ValueToMetric and Metadata are kept
// and have no effect: metrics never carry request values.
package rules
