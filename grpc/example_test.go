package ratekitgrpc_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/core/storetest"
	ratekitgrpc "github.com/ratekit/ratekit/grpc"
)

// start serves the test service with opts on a free port of 127.0.0.1
// and returns a connection to it, with dial options copts.
func start(opts []grpc.ServerOption, copts ...grpc.DialOption) (*grpc.ClientConn, func()) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	srv.RegisterService(&testService, nil)
	go func() { _ = srv.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///"+lis.Addr().String(),
		append([]grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}, copts...)...)
	if err != nil {
		log.Fatal(err)
	}
	return conn, func() { _ = conn.Close(); srv.Stop() }
}

// Two calls a minute per client IP; the third is ResourceExhausted, with
// the limit's name and the exact delay in its details.
func ExampleUnaryServerInterceptor() {
	lim := core.Must(core.NewLimiter(core.Limit{Name: "api", Algorithm: core.FixedWindow, Rate: core.PerMinute(2)},
		core.WithStore(&core.MemoryStore{Clock: storetest.NewClock(storetest.Epoch.Add(45 * time.Second)).Now})))
	conn, stop := start([]grpc.ServerOption{
		grpc.ChainUnaryInterceptor(ratekitgrpc.UnaryServerInterceptor(lim, ratekitgrpc.PeerIP)),
	})
	defer stop()

	for range 3 {
		var header metadata.MD
		err := conn.Invoke(context.Background(), "/test.Svc/Echo", wrapperspb.String("hi"), new(wrapperspb.StringValue), grpc.Header(&header))
		st := status.Convert(err)
		fmt.Println(st.Code(), "remaining:", header.Get("x-ratelimit-remaining"))
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *errdetails.RetryInfo:
				fmt.Println("retry in", d.GetRetryDelay().AsDuration())
			case *errdetails.QuotaFailure:
				fmt.Println("limit", d.GetViolations()[0].GetSubject())
			}
		}
	}
	// Output:
	// OK remaining: [1]
	// OK remaining: [0]
	// ResourceExhausted remaining: [0]
	// retry in 15s
	// limit api
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

	retry, err := ratekitgrpc.NewRetry(ratekitgrpc.WithMaxRetries(3), ratekitgrpc.WithMaxWait(time.Minute),
		ratekitgrpc.WithClock(waitClock{clock})) // tests only: the system clock by default
	if err != nil {
		log.Fatal(err)
	}
	conn, stop := start([]grpc.ServerOption{
		grpc.ChainUnaryInterceptor(ratekitgrpc.UnaryServerInterceptor(lim, ratekitgrpc.PeerIP)),
	}, grpc.WithChainUnaryInterceptor(retry.Unary), grpc.WithChainStreamInterceptor(retry.Stream))
	defer stop()

	for _, v := range []string{"first", "second"} {
		out := new(wrapperspb.StringValue)
		err := conn.Invoke(context.Background(), "/test.Svc/Echo", wrapperspb.String(v), out)
		fmt.Println(out.GetValue(), status.Code(err))
	}
	// Output:
	// first OK
	// waiting 10s
	// second OK
}
