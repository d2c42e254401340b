package rls

import (
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"time"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxJSONBody bounds /json request bodies; a valid request is far smaller.
const maxJSONBody = 1 << 20

// JSONHandler serves POST /json: a protojson RateLimitRequest in, the
// RateLimitResponse as protojson out, with 200 for OK, 429 for OVER_LIMIT,
// 400 for a bad request, 408 when the body does not arrive within the
// server's read timeout, 415 for a Content-Type other than application/json
// and 503 when the backend is unavailable.
func (s *Service) JSONHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			httpError(w, http.StatusMethodNotAllowed, "rls: /json takes POST with a JSON RateLimitRequest")
			return
		}
		// A browser sends text/plain, form and multipart POSTs to any site
		// without a CORS preflight; application/json needs one, so
		// accepting only it keeps other web pages from spending quota (or
		// probing limits) through a visitor's browser.
		if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
			w.Header().Set("Accept-Post", "application/json")
			httpError(w, http.StatusUnsupportedMediaType,
				fmt.Sprintf("rls: /json takes Content-Type application/json, got %q", r.Header.Get("Content-Type")))
			return
		}
		var start time.Time
		if s.cfg.Metrics != nil {
			start = time.Now()
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxJSONBody))
		if err != nil {
			var tooBig *http.MaxBytesError
			if errors.As(err, &tooBig) {
				httpError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("rls: request body exceeds %d bytes", maxJSONBody))
				return
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				httpError(w, http.StatusRequestTimeout, "rls: request body not received within the read timeout")
				return
			}
			httpError(w, http.StatusBadRequest, fmt.Sprintf("rls: read request body: %v", err))
			return
		}
		var req pb.RateLimitRequest
		if err := protojson.Unmarshal(body, &req); err != nil {
			// Counted as gRPC counts a request that does not decode.
			err = s.undecodable(start, fmt.Sprintf("rls: decode RateLimitRequest: %v", err))
			httpError(w, http.StatusBadRequest, status.Convert(err).Message())
			return
		}
		resp, err := s.ShouldRateLimit(r.Context(), &req)
		if err != nil {
			code := http.StatusInternalServerError
			switch status.Code(err) {
			case codes.InvalidArgument:
				code = http.StatusBadRequest
			case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
				code = http.StatusServiceUnavailable
			}
			httpError(w, code, status.Convert(err).Message())
			return
		}
		out, err := protojson.Marshal(resp)
		if err != nil {
			httpError(w, http.StatusInternalServerError, fmt.Sprintf("rls: encode response: %v", err))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if resp.GetOverallCode() == pb.RateLimitResponse_OVER_LIMIT {
			w.WriteHeader(http.StatusTooManyRequests)
		}
		_, _ = w.Write(out)
	})
}

func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, msg+"\n")
}
