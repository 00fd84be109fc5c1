package rls

import (
	"io"
	"net/http"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxJSONBytes bounds the body of a JSON request.
const maxJSONBytes = 1 << 20

// JSON returns the HTTP handler of the JSON form of ShouldRateLimit, as
// the Envoy service serves it on POST /json: the body is a
// RateLimitRequest in protobuf's JSON mapping, the answer its
// RateLimitResponse, with status 200, or 429 when the overall code is
// OVER_LIMIT. A body that is not such a request (or over 1 MiB) gets 400,
// a failed decision 503 or 500, each with a fixed message.
func (s *Service) JSON() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBytes))
		if err != nil {
			http.Error(w, "the body could not be read, or is over 1 MiB", http.StatusBadRequest)
			return
		}
		var req rlspb.RateLimitRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			http.Error(w, "the body is not a RateLimitRequest in JSON", http.StatusBadRequest)
			return
		}
		resp, err := s.ShouldRateLimit(r.Context(), &req)
		if err != nil {
			st := status.Convert(err)
			code := http.StatusInternalServerError
			switch st.Code() {
			case codes.InvalidArgument:
				code = http.StatusBadRequest
			case codes.Unavailable:
				code = http.StatusServiceUnavailable
			}
			http.Error(w, st.Message(), code)
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			http.Error(w, "the answer could not be encoded", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.OverallCode == rlspb.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		_, _ = w.Write(out)
	})
}
