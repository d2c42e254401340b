// Package arch enforces, in plain `go test`, the import rules that the
// package docs of this module state ("must not import the backends",
// "must import nothing outside the standard library", "must not be
// imported by non-test code", "must not know gRPC"): one allow-list per
// package in rules_test.go, checked against `go list -deps -json` over the
// whole module. A package that is not in the allow-list fails the test
// until it is added there with the rule its doc states, and a package
// whose doc states a "must not import" rule must have a restricting entry.
//
// Test support is recognised by its prefix, internal/testkit/, not by a
// list. It also checks the claims of docs/architecture.md that can be
// checked mechanically (claims_test.go): no request-path package starts a
// goroutine outside the files it names, and every Redis name is built in
// a key.go (or a file it names).
//
// It also keeps the map of the code current: the package map of
// docs/development.md has a line for every package and none for a package
// that is not there, and every link into docs/architecture.md names one of
// its headings (docs/architecture.md#import-rules).
//
// The package has no runtime code and must not be imported; it only runs
// `go list` and reads the module's source files, README.md and docs.
package arch
