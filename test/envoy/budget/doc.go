// Package budget runs budgets counted in something other than requests
// (tokens of an LLM response) through a real Envoy 1.40.
package budget
