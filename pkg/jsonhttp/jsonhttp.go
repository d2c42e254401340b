// Package jsonhttp writes JSON HTTP responses, one way for every JSON API
// of the service (the console's, explain's, the override API's), so that
// each sets the same Content-Type and encodes the same way. It imports
// nothing outside the standard library and knows nothing of what it
// writes.
package jsonhttp

import (
	"encoding/json"
	"net/http"
)

// Write sends v as JSON (one line, as json.Encoder writes it) with status
// code. Headers the caller set before stay.
func Write(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	// The status is sent: an encoding error can only cut the body short.
	_ = json.NewEncoder(w).Encode(v)
}

// Error sends err as {"error": "..."} with status code.
func Error(w http.ResponseWriter, code int, err error) {
	Write(w, code, map[string]string{"error": err.Error()})
}
