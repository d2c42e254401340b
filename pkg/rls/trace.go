package rls

import "context"

// RequestTracer traces ShouldRateLimit calls: Start begins a span for one
// call to domain with its number of descriptors, and returns the context
// the call continues in (so that the backend's span is its child) and the
// span to finish. Implementations must be safe for concurrent use. The
// service declares it, so that it stays free of any tracing library.
type RequestTracer interface {
	Start(ctx context.Context, domain string, descriptors int) (context.Context, RequestSpan)
}

// RequestSpan is one call's span; Finish records the call's overall code
// (OK, OVER_LIMIT, or UNKNOWN when it failed) and error, and ends it.
type RequestSpan interface {
	Finish(code string, err error)
}
