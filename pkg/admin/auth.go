package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// RequireToken serves h only to requests that are authenticated: by a
// client certificate the listener verified (mTLS: the debug listener with
// a client CA), or by the token in tokenFile ("Authorization: Bearer
// <token>"). Others get 401, and every request gets 403 when neither is
// configured (the API is off). The file is read on each request: admin
// calls are rare, and a rotated secret applies at once. An unreadable or
// empty file refuses everyone (500) rather than letting an empty token
// match.
func RequireToken(tokenFile string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
			h.ServeHTTP(w, r)
			return
		}
		if tokenFile == "" {
			text(w, http.StatusForbidden, "admin: the admin API is disabled: start envoy-rls with --admin-token-file, or with --admin-tls-client-ca for mTLS")
			return
		}
		b, err := os.ReadFile(tokenFile)
		want := strings.TrimSpace(string(b))
		if err == nil && want == "" {
			err = fmt.Errorf("%s is empty", tokenFile)
		}
		if err != nil {
			text(w, http.StatusInternalServerError, fmt.Sprintf("admin: read --admin-token-file: %v", err))
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || !sameToken(got, want) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="envoy-rls admin"`)
			text(w, http.StatusUnauthorized, "admin: missing or wrong bearer token (want Authorization: Bearer <the --admin-token-file token>)")
			return
		}
		h.ServeHTTP(w, r)
	})
}

// sameToken compares in constant time; hashing first makes the time
// independent of the lengths too.
func sameToken(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}
