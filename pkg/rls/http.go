package rls

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
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
// 400 for a bad request, 403 for a browser's cross-site request, 408 when
// the body does not arrive within the server's read timeout, 415 for a
// body that is not a JSON object and 503 when the backend is unavailable.
//
// Any Content-Type is read: envoyproxy/ratelimit documents /json with
// `curl -d`, which sends a form type. What keeps other web pages from
// spending quota (or probing limits) through a visitor's browser is the
// browser's own word on where a request comes from: a cross-site
// Sec-Fetch-Site, or an Origin other than this server's, is refused
// before the body is read. Clients that are not browsers send neither.
func (s *Service) JSONHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			httpError(w, http.StatusMethodNotAllowed, "rls: /json takes POST with a JSON RateLimitRequest")
			return
		}
		if why := crossSite(r); why != "" {
			httpError(w, http.StatusForbidden, "rls: /json refuses browser requests from other sites: "+why)
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
		if !jsonObject(body) {
			w.Header().Set("Accept-Post", "application/json")
			httpError(w, http.StatusUnsupportedMediaType, "rls: /json takes a JSON RateLimitRequest, an object; the body is not one")
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

// crossSite says why r is a browser's request from another site, or "".
// Sec-Fetch-Site "cross-site" is the browser saying so; an Origin header,
// which browsers send with every cross-origin POST, must name this server
// (its host as the request addressed it), and "null" (a sandboxed page or
// a redirect) names none.
func crossSite(r *http.Request) string {
	if strings.EqualFold(r.Header.Get("Sec-Fetch-Site"), "cross-site") {
		return "Sec-Fetch-Site: cross-site"
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		return ""
	}
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
		return fmt.Sprintf("Origin %q is not this server (%s)", origin, r.Host)
	}
	return ""
}

// jsonObject reports whether body starts, after white space, as a JSON
// object does; what is not one cannot be a RateLimitRequest, whatever the
// Content-Type said.
func jsonObject(body []byte) bool {
	b := bytes.TrimLeft(body, " \t\r\n")
	return len(b) > 0 && b[0] == '{'
}

func httpError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(code)
	_, _ = io.WriteString(w, msg+"\n")
}
