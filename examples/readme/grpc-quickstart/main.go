package main

import (
	"log"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	ratekitgrpc "github.com/ratekit/ratekit/grpc"
)

func main() {
	// Each client IP gets 100 calls a minute; past that, ResourceExhausted.
	srv := grpc.NewServer(ratekitgrpc.LimitByIP(100, time.Minute)...)
	healthpb.RegisterHealthServer(srv, health.NewServer())

	lis, err := net.Listen("tcp", ":8080")
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(srv.Serve(lis))
}
