// Package docs runs the examples of README.md and docs/*.md, so that what
// the documentation shows is what the binary does. A shell block whose
// fence reads ```sh run (or ```console run, with $ prompts) is run with
// bash against a freshly built envoy-rls, and its output is compared with
// the block that follows when that block's fence says output (```json
// output, ```text output), or with the lines after each $ command. The
// package has no runtime code and must not be imported; its tests drive
// the binary as a process and import none of the service's packages.
//
// A block's fence says what it needs after "run": nothing (offline
// commands: validate, explain), "serve" (a server on examples/config, as
// make run starts it, with --admin-token-file admin-token), or "redis" (the
// same server over a real redis-server). Each block gets its own server and
// workspace, so no block depends on another's counters. Shell blocks that
// cannot run here (kubectl, helm install, docker) say ```sh norun.
//
// Beside the examples: every yaml block that is a whole rule file
// validates, the README's Envoy excerpt is lines of the bootstrap that a
// real Envoy runs, and the README's first screen says what envoy-rls is,
// how to run it and how Envoy reaches it.
package docs
