package explain

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/envoy-rls/envoy-rls/pkg/jsonhttp"
)

// maxRequestBytes bounds a /debug/explain request body.
const maxRequestBytes = 1 << 20

// Handler serves POST /debug/explain: a JSON Request in, a JSON Report
// out. It only reads (see the package comment): POST carries the
// descriptors, it changes nothing.
func Handler(e *Explainer) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req Request
		dec := json.NewDecoder(io.LimitReader(r.Body, maxRequestBytes))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			httpError(w, http.StatusBadRequest, fmt.Errorf("explain: decode request: %w", err))
			return
		}
		rep, err := e.Explain(r.Context(), req)
		if err != nil {
			code := http.StatusInternalServerError
			if req.Validate() != nil {
				code = http.StatusBadRequest
			}
			httpError(w, code, err)
			return
		}
		jsonhttp.Write(w, http.StatusOK, rep)
	})
}

func httpError(w http.ResponseWriter, code int, err error) { jsonhttp.Error(w, code, err) }

// DecodeError reads the error a Handler answered with, for clients.
func DecodeError(status int, body []byte) error {
	var e struct {
		Error string `json:"error"`
	}
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		return errors.New(e.Error)
	}
	return fmt.Errorf("explain: HTTP %d: %s", status, body)
}
