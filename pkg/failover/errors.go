package failover

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
)

// Error kinds, the label values of envoy_rls_backend_errors_total. A fixed
// set: an error's text never becomes a label.
const (
	kindTimeout    = "timeout"
	kindConnection = "connection"
	kindReply      = "reply"
	kindOpen       = "circuit_open"
	kindCanceled   = "canceled"
	kindOther      = "other"
)

var errorKinds = []string{kindTimeout, kindConnection, kindReply, kindOpen, kindCanceled, kindOther}

// classify sorts a primary's error into a kind without importing the
// primary's client library: go-redis marks server error replies with a
// RedisError method, and its network errors are the standard library's.
func classify(err error) string {
	var (
		reply interface{ RedisError() }
		nerr  net.Error
		operr *net.OpError
	)
	switch {
	case errors.Is(err, ErrOpen):
		return kindOpen
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &nerr) && nerr.Timeout():
		return kindTimeout
	case errors.As(err, &reply):
		return kindReply
	case errors.As(err, &operr), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, syscall.EPIPE), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, net.ErrClosed):
		return kindConnection
	case errors.Is(err, context.Canceled):
		return kindCanceled
	case strings.Contains(err.Error(), "timeout"):
		// go-redis's pool timeout is a plain errors.New.
		return kindTimeout
	}
	return kindOther
}
