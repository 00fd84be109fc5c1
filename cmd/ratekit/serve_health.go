package main

import (
	"sync"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// rlsService is the gRPC name of the rate limit service, whose health is
// the server's.
var rlsService = rlspb.RateLimitService_ServiceDesc.ServiceName

// healthService is grpc.health.v1.Health for the server ("") and the rate
// limit service: NOT_SERVING until serving starts, SERVING then, and
// NOT_SERVING again from the start of the shutdown. Check and List are
// those of package health's server; Watch is its own, so that a Watch
// stream ends once it has told NOT_SERVING at shutdown instead of holding
// up the graceful stop until its timeout.
type healthService struct {
	*health.Server

	mu       sync.Mutex
	serving  bool
	stopping bool
	changed  chan struct{} // closed, and replaced, at each change
}

func newHealthService() *healthService {
	h := &healthService{Server: health.NewServer(), changed: make(chan struct{})}
	h.Server.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	h.Server.SetServingStatus(rlsService, healthpb.HealthCheckResponse_NOT_SERVING)
	return h
}

// serve reports SERVING.
func (h *healthService) serve() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopping {
		return
	}
	h.serving = true
	h.Server.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	h.Server.SetServingStatus(rlsService, healthpb.HealthCheckResponse_SERVING)
	close(h.changed)
	h.changed = make(chan struct{})
}

// stop reports NOT_SERVING for good, and ends the Watch streams.
func (h *healthService) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopping {
		return
	}
	h.serving, h.stopping = false, true
	h.Server.Shutdown()
	close(h.changed)
	h.changed = make(chan struct{})
}

// Watch sends the status of the service asked for, and each change of
// it, until the stream ends or the shutdown starts: then it sends
// NOT_SERVING and ends the stream.
func (h *healthService) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	known := req.GetService() == "" || req.GetService() == rlsService
	last := healthpb.HealthCheckResponse_ServingStatus(-1)
	for {
		h.mu.Lock()
		st, stopping, changed := healthpb.HealthCheckResponse_NOT_SERVING, h.stopping, h.changed
		if !known {
			st = healthpb.HealthCheckResponse_SERVICE_UNKNOWN
		} else if h.serving {
			st = healthpb.HealthCheckResponse_SERVING
		}
		h.mu.Unlock()
		if st != last {
			if err := stream.Send(&healthpb.HealthCheckResponse{Status: st}); err != nil {
				return err
			}
			last = st
		}
		if stopping {
			return nil
		}
		select {
		case <-changed:
		case <-stream.Context().Done():
			return status.Error(codes.Canceled, "the stream ended")
		}
	}
}
