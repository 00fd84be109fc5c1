package ratekitconnect_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/types/known/wrapperspb"

	ratekitconnect "github.com/ratekit/ratekit/connect"
	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
)

// status is the code of err, "ok" for none.
func status(err error) string {
	if err == nil {
		return "ok"
	}
	return connect.CodeOf(err).String()
}

// Two calls a minute per client IP; the third is ResourceExhausted, with
// the limit's name and the exact delay in its details.
func ExampleNew() {
	lim := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)},
		core.WithStore(&core.MemoryStore{Clock: storetest.NewClock(storetest.Epoch.Add(45 * time.Second)).Now})))
	greet := connect.NewUnaryHandler("/greet.v1.GreetService/Greet",
		func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			return connect.NewResponse(wrapperspb.String("hello " + req.Msg.GetValue())), nil
		},
		connect.WithInterceptors(ratekitconnect.New(lim, ratekitconnect.PeerIP)))
	url, stop := startServer(greet)
	defer stop()

	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](http.DefaultClient, url+"/greet.v1.GreetService/Greet")
	for range 3 {
		resp, err := client.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("ada")))
		if err != nil {
			fmt.Println(status(err), "remaining:", meta(err).Get("X-Ratelimit-Remaining"))
			for _, d := range err.(*connect.Error).Details() {
				switch v, _ := d.Value(); v := v.(type) {
				case *errdetails.RetryInfo:
					fmt.Println("retry in", v.GetRetryDelay().AsDuration())
				case *errdetails.QuotaFailure:
					fmt.Println("limit", v.GetViolations()[0].GetSubject())
				}
			}
			continue
		}
		fmt.Println(resp.Msg.GetValue(), "remaining:", resp.Header().Get("X-Ratelimit-Remaining"))
	}
	// Output:
	// hello ada remaining: 1
	// hello ada remaining: 0
	// resource_exhausted remaining: 0
	// retry in 15s
	// limit api
}

// One line: each client IP may make one call a minute to the handlers
// given the option.
func ExampleLimitByIP() {
	greet := connect.NewUnaryHandler("/greet.v1.GreetService/Greet",
		func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			return connect.NewResponse(wrapperspb.String("hello " + req.Msg.GetValue())), nil
		},
		ratekitconnect.LimitByIP(1, time.Minute))
	url, stop := startServer(greet)
	defer stop()

	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](http.DefaultClient, url+"/greet.v1.GreetService/Greet")
	for range 2 {
		_, err := client.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("ada")))
		fmt.Println(status(err))
	}
	// Output:
	// ok
	// resource_exhausted
}

// Each stream may receive 10 bytes a minute from a client IP: the message
// past that makes Receive fail, and the handler ends the stream.
func ExampleStreamMessages() {
	lim := core.Must(core.NewLimiter(core.Limit{Name: "bytes", Algorithm: core.FixedWindow, Rate: core.PerMinute(10)},
		core.WithStore(&core.MemoryStore{Clock: storetest.NewClock(storetest.Epoch).Now})))
	size := func(msg any) int { return len(msg.(*wrapperspb.StringValue).GetValue()) }
	count := connect.NewClientStreamHandler("/store.v1.Store/Put",
		func(_ context.Context, stream *connect.ClientStream[wrapperspb.StringValue]) (*connect.Response[wrapperspb.Int64Value], error) {
			n := int64(0)
			for stream.Receive() {
				n++
			}
			if err := stream.Err(); err != nil {
				return nil, err
			}
			return connect.NewResponse(wrapperspb.Int64(n)), nil
		},
		connect.WithInterceptors(ratekitconnect.StreamMessages(lim, ratekitconnect.PeerIP, size)))
	url, stop := startServer(count)
	defer stop()

	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.Int64Value](http.DefaultClient, url+"/store.v1.Store/Put")
	for _, msgs := range [][]string{{"abcd", "efgh"}, {"ij", "klm"}} {
		stream := client.CallClientStream(context.Background())
		for _, m := range msgs {
			if stream.Send(wrapperspb.String(m)) != nil {
				break
			}
		}
		resp, err := stream.CloseAndReceive()
		if err != nil {
			fmt.Println(status(err))
			continue
		}
		fmt.Println("stored", resp.Msg.GetValue())
	}
	// Output:
	// stored 2
	// resource_exhausted
}

// waitClock is a client.Clock that reports each wait instead of sleeping,
// and moves the server's clock past it.
type waitClock struct{ server *storetest.Clock }

func (c waitClock) Now() time.Time { return c.server.Now() }

func (c waitClock) Sleep(_ context.Context, d time.Duration) error {
	fmt.Println("waiting", d)
	c.server.Advance(d)
	return nil
}

// The client interceptor waits the delay of the RetryInfo and calls
// again.
func ExampleRetry() {
	clock := storetest.NewClock(storetest.Epoch.Add(50 * time.Second))
	lim := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(1)},
		core.WithStore(&core.MemoryStore{Clock: clock.Now})))
	greet := connect.NewUnaryHandler("/greet.v1.GreetService/Greet",
		func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			return connect.NewResponse(wrapperspb.String("hello " + req.Msg.GetValue())), nil
		},
		connect.WithInterceptors(ratekitconnect.New(lim, ratekitconnect.PeerIP)))
	url, stop := startServer(greet)
	defer stop()

	retry, err := ratekitconnect.NewRetry(ratekitconnect.WithMaxRetries(3), ratekitconnect.WithMaxWait(time.Minute),
		ratekitconnect.WithClock(waitClock{clock})) // tests only: the system clock by default
	if err != nil {
		log.Fatal(err)
	}
	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](http.DefaultClient,
		url+"/greet.v1.GreetService/Greet", connect.WithInterceptors(retry))
	for _, name := range []string{"ada", "grace"} {
		resp, err := client.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String(name)))
		if err != nil {
			fmt.Println(status(err))
			continue
		}
		fmt.Println(resp.Msg.GetValue())
	}
	// Output:
	// hello ada
	// waiting 10s
	// hello grace
}
