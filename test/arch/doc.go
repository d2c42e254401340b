// Package arch enforces, in plain `go test`, the import rules that the
// package docs of this module state ("must not import the backends",
// "must import nothing outside the standard library", "must not be
// imported by non-test code", "must not know gRPC"): one allow-list per
// package in rules_test.go, checked against `go list -deps -json` over the
// whole module. A package that is not in the allow-list fails the test
// until it is added there with the rule its doc states, and a package
// whose doc states a "must not import" rule must have a restricting entry.
//
// It also keeps the map of the code current: the package map of docs/development.md has
// a line for every package, and every link into docs/architecture.md names
// one of its headings (docs/architecture.md#import-rules).
//
// The package has no runtime code and must not be imported; it only runs
// `go list` and reads the module's source files, README.md and docs.
package arch
