package main

import (
	"context"
	"log"
	"net/http"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	ratekitconnect "github.com/ratekit/ratekit/connect"
)

func greet(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
	return connect.NewResponse(wrapperspb.String("hello " + req.Msg.GetValue())), nil
}

func main() {
	// Each client IP gets 100 calls a minute; past that, ResourceExhausted.
	const procedure = "/greet.v1.GreetService/Greet"
	mux := http.NewServeMux()
	mux.Handle(procedure, connect.NewUnaryHandler(procedure, greet, ratekitconnect.LimitByIP(100, time.Minute)))

	// Connect over HTTP/1.1 and HTTP/2; gRPC clients need HTTP/2.
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	protocols.SetUnencryptedHTTP2(true)
	srv := &http.Server{Addr: ":8080", Handler: mux, Protocols: protocols, ReadHeaderTimeout: 10 * time.Second}
	log.Fatal(srv.ListenAndServe())
}
