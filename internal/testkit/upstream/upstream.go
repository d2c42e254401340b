// Package upstream holds the rule files of envoyproxy/ratelimit's README
// examples, as the README gives them, for the tests that replay those
// examples against envoy-rls (pkg/rules matching, pkg/rls decisions, the
// end-to-end binary): one copy, so that every replay reads the same rules.
// It holds data only; non-test code must not import it.
package upstream

// Example2 is README example 2, domain "messaging": 5 marketing messages a
// day per number, nested under the message type, and 100 messages a day
// to any number.
const Example2 = `
domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5

  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
`

// Example7 is README example 7, domain "example7": a 10 per second limit
// on (key_2=value_2, user=bkthomps) that replaces the named 5 per second
// one on (key_1=value_1, user=bkthomps).
const Example7 = `
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 5
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 10
          unit: second
`
