// Package adaptertest is the test suite of ratekit's framework adapters
// (Gin, Echo, Fiber, Chi, and any written later): what the adapters share
// is checked here, once, through each adapter's framework, so that an
// adapter's own tests keep only what it alone has: its framework's client
// address, its route patterns, how its framework reports errors, its
// allocation counts.
//
// # Scenarios
//
// An adapter's tests call RunScenarios with one ScenarioMount, which
// builds the adapter's middleware, with the adapter's own public functions
// and options, as a framework-neutral Scenario says. Through it
// RunScenarios runs the conformance table of Run (every request answered
// byte for byte as the net/http middleware, package stdhttp, answers it,
// with the same log lines), the rules scenarios of RunRules, and the
// scenarios of every option and shared key function, with expectations
// computed by hand on a stopped clock. Gin's mount is the model:
//
//	func mount(t *testing.T, s adaptertest.Scenario) adaptertest.Serve {
//		var key ratekitgin.Key // a nil s.Key stays nil: New must panic
//		switch s.By {
//		case adaptertest.ByKey:
//			if s.Key != nil {
//				key = func(c *gin.Context) (string, error) { return s.Key(c.GetHeader(adaptertest.KeyHeader)) }
//			}
//		case adaptertest.ByPeerIP:
//			key = ratekitgin.PeerIP
//		case adaptertest.ByIP:
//			var err error
//			key, err = ratekitgin.IP(s.IPOptions...)
//			require.NoError(t, err)
//		case adaptertest.ByHeader:
//			key = ratekitgin.Header(adaptertest.KeyHeader)
//		case adaptertest.ByUser:
//			key = ratekitgin.User(adaptertest.UserKey)
//		}
//		opts := []ratekitgin.Option{ratekitgin.WithHeaders(s.Headers), ratekitgin.WithLogger(s.Logger)}
//		if s.Skip != nil {
//			opts = append(opts, ratekitgin.WithSkipper(func(c *gin.Context) bool { return s.Skip(c.GetHeader(adaptertest.SkipHeader)) }))
//		}
//		if s.Cost != nil {
//			opts = append(opts, ratekitgin.WithCost(func(c *gin.Context) int { return s.Cost(c.GetHeader(adaptertest.CostHeader)) }))
//		}
//		if s.Denied != nil {
//			opts = append(opts, ratekitgin.WithDeniedHandler(func(c *gin.Context, d core.Decision) { c.String(s.Denied(d)) }))
//		}
//		if s.OnError != nil {
//			opts = append(opts, ratekitgin.WithErrorHandler(func(c *gin.Context, err error) { c.String(s.OnError(err)) }))
//		}
//		if s.Queue != nil {
//			opts = append(opts, ratekitgin.WithQueue(s.Queue))
//		}
//		if s.NilOptions {
//			opts = append(opts, ratekitgin.WithSkipper(nil), ratekitgin.WithCost(nil), ratekitgin.WithDeniedHandler(nil), ratekitgin.WithErrorHandler(nil))
//		}
//		if s.DecisionInContext {
//			opts = append(opts, ratekitgin.WithDecisionInContext())
//		}
//
//		r := gin.New()
//		r.Use(func(c *gin.Context) { // the app's middleware
//			if u := c.GetHeader(adaptertest.UserHeader); u != "" {
//				c.Set(adaptertest.UserKey, u)
//			}
//			if s.Context != nil {
//				c.Request = c.Request.WithContext(s.Context(c.Request.Context()))
//			}
//		})
//		if s.Rules {
//			r.Use(ratekitgin.Rules(s.Engine, opts...))
//		} else {
//			r.Use(ratekitgin.New(s.Limiter, key, opts...))
//		}
//		handler := func(c *gin.Context) { c.String(http.StatusOK, adaptertest.Body(ratekitgin.DecisionFrom(c))) }
//		for _, rt := range adaptertest.Routes {
//			r.Handle(rt.Method, rt.Path, handler)
//		}
//		if s.Group != nil {
//			r.Group(adaptertest.GroupPrefix, ratekitgin.New(s.Group, key, opts...)).GET("/items", handler)
//		}
//		return adaptertest.Handler(r)
//	}
//
//	func TestScenarios(t *testing.T) { adaptertest.RunScenarios(t, mount) }
//
// An adapter whose handlers return an error returns the write's:
//
//	ratekitecho.WithDeniedHandler(func(c echo.Context, d core.Decision) error { return c.String(s.Denied(d)) })
//	ratekitfiber.WithDeniedHandler(func(c *fiber.Ctx, d core.Decision) error {
//		status, body := s.Denied(d)
//		return c.Status(status).SendString(body)
//	})
//
// and its app's middleware returns next's error. The context that
// s.Context replaces is the one the adapter's port reads: Echo's
// c.SetRequest(c.Request().WithContext(s.Context(c.Request().Context()))),
// Fiber's c.SetUserContext(s.Context(c.UserContext())). Where the
// framework's values are stored is the framework's: c.Set for Gin and
// Echo, c.Locals for Fiber, and the request's context for net/http and
// Chi (context.WithValue(ctx, adaptertest.UserKey, u)).
//
// The Serve that a mount returns hands the framework the request's
// RemoteAddr as the TCP peer, every line of a header field sent more than
// once, and the body. Handler does for an http.Handler (Gin, Echo, Chi),
// and Wire for a server that reads requests from a net.Conn. Fiber's
// app.Test serves every request from 0.0.0.0, and adaptor.FiberApp keeps
// only the last line of a field, so Fiber's Serve (v2's and v3's) is
// Wire's, through the wire format to fasthttp from the peer in RemoteAddr:
//
//	adaptertest.Wire(t, func(c net.Conn) error { return fasthttp.ServeConn(c, app.Handler()) })
//
// # Calls
//
// The RPC ports (grpc-go's interceptors, Connect's) run the call table of
// RunCalls instead. A CallMount builds the port's unary server
// interceptor as a framework-neutral CallScenario says, serves
// CallService (MethodEcho, MethodOther) through it on a listener of
// 127.0.0.1, and returns a Caller: one unary call over a real connection
// from the call's peer (DialFrom), with its metadata, converted to an
// Answer (the code's name, the message, the reply, the header metadata
// with lower-case keys, the RetryInfo's delay, the QuotaFailure's
// violations). The gRPC mount is the model:
//
//	func mountCalls(t *testing.T, s adaptertest.CallScenario) adaptertest.Caller {
//		var key ratekitgrpc.Key // a nil s.Key stays nil: the interceptor must panic
//		switch s.By {
//		case adaptertest.ByKey:
//			if s.Key != nil {
//				key = func(ctx context.Context, _ string) (string, error) { return s.Key(first(ctx, adaptertest.KeyMetadata)) }
//			}
//		case adaptertest.ByPeerIP:
//			key = ratekitgrpc.PeerIP
//		case adaptertest.ByIP:
//			key, _ = ratekitgrpc.IP(s.IPOptions...)
//		case adaptertest.ByHeader:
//			key = ratekitgrpc.Metadata(adaptertest.KeyMetadata)
//		}
//		opts := []ratekitgrpc.Option{ratekitgrpc.WithHeaders(s.Headers), ratekitgrpc.WithLogger(s.Logger)}
//		// and WithSkipper, WithMethods, WithCost, WithDecisionInContext as s says
//		ic := ratekitgrpc.UnaryServerInterceptor(s.Limiter, key, opts...) // or UnaryRules(s.Engine, opts...)
//		// serve CallService through ic; return the Caller
//	}
//
//	func TestConformance(t *testing.T) { adaptertest.RunCalls(t, mountCalls) }
//
// where first(ctx, name) is the first value of the incoming metadata name.
// A Connect port's Caller dials through an http.Transport whose
// DialContext is DialFrom, converts its codes to the names of the Code
// constants (connect.CodeResourceExhausted is CodeResourceExhausted),
// reads the details from the error, and gives the response's header
// fields, or the error's metadata, with lower-case keys.
//
// # Other suites and helpers
//
// RunConcurrency checks an adapter's Concurrency middleware, RunAdmin the
// admin handler mounted as the framework mounts net/http handlers, and
// RunLimitByIP its one-line LimitByIP, each through a mount of its own.
// Limiter and Engine build the limiters and engines of an adapter's own
// tests on stopped clocks. An adapter's allocation tests serve one request
// in place (InPlace) through its framework with and without its middleware
// limited by Unlimited, and compare the counts of Allocs, which skips them
// under -short and the race detector.
package adaptertest
