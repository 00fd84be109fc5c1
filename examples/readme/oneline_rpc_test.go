package readme

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// TestOneLineRPC serves the one-line quick starts of grpc-go and Connect
// on real listeners: 100 calls a minute from the client, then
// ResourceExhausted, with the remaining count in the header fields.
func TestOneLineRPC(t *testing.T) {
	t.Run("grpc", func(t *testing.T) {
		srv := onelineGRPC()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go func() { _ = srv.Serve(l) }()
		defer srv.Stop()
		conn, err := grpc.NewClient(l.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		client := healthpb.NewHealthClient(conn)
		clearOfMinute()
		for i := range 101 {
			var md metadata.MD
			_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&md))
			if i < 100 {
				if err != nil || len(md.Get("x-ratelimit-remaining")) != 1 {
					t.Fatalf("call %d: %v, header %v", i+1, err, md)
				}
				continue
			}
			if status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("call 101: %v, want ResourceExhausted", err)
			}
		}
	})
	t.Run("connect", func(t *testing.T) {
		srv := httptest.NewServer(onelineConnect())
		defer srv.Close()
		client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](http.DefaultClient, srv.URL+greetProcedure)
		clearOfMinute()
		for i := range 101 {
			resp, err := client.CallUnary(context.Background(), connect.NewRequest(wrapperspb.String("you")))
			if i < 100 {
				if err != nil || resp.Msg.GetValue() != "hello you" || resp.Header().Get("X-Ratelimit-Remaining") == "" {
					t.Fatalf("call %d: %v", i+1, err)
				}
				continue
			}
			if connect.CodeOf(err) != connect.CodeResourceExhausted {
				t.Fatalf("call 101: %v, want ResourceExhausted", err)
			}
		}
	})
}
