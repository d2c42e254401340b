package docs

import "testing"

// TestCompareOutput: the comparison tolerates JSON field order and timing
// values, and nothing else.
func TestCompareOutput(t *testing.T) {
	tests := []struct {
		name      string
		want, got string
		same      bool
	}{
		{"equal text", "a\nb", "a\nb\n", true},
		{"other text", "a\nb", "a\nc", false},
		{"missing line", "a\nb", "a", false},
		{"extra line", "a", "a\nb", false},
		{"durations", "reset=50ms resets in 18s", "reset=49.5ms resets in 24h4m45s", true},
		{"a number is not a duration", "remaining=39", "remaining=38", false},
		{"timestamps", "expires 2026-12-02T02:56:47Z", "expires 2027-01-01T00:00:00.5Z", true},
		{"JSON field order", `{"a":1,"b":"0.020s"}`, `{"b":"1s","a":1}`, true},
		{"JSON value", `{"a":1}`, `{"a":2}`, false},
		{"JSON missing field", `{"a":1,"b":2}`, `{"a":1}`, false},
		{"pretty JSON", "{\n  \"a\": [1, 2]\n}", `{"a":[1,2]}`, true},
		{"JSON line among text", "{\"a\":1,\"b\":2}\nHTTP 200", "{\"b\":2,\"a\":1}\nHTTP 200", true},
		{"JSON line, other status", "{\"a\":1}\nHTTP 200", "{\"a\":1}\nHTTP 429", false},
		{"ellipsis", "a\n...\nd", "a\nb\nc\nd", true},
		{"ellipsis, wrong end", "a\n...\nd", "a\nb\nc", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := compareOutput(tt.want, tt.got)
			if (msg == "") != tt.same {
				t.Errorf("compareOutput(%q, %q) = %q, want same: %v", tt.want, tt.got, msg, tt.same)
			}
		})
	}
}

// TestParseFences: fences in list items lose their indentation, and an
// output block is found only right after its command block.
func TestParseFences(t *testing.T) {
	doc := "text\n\n  ```console run\n  $ echo a \\\n    b\n  a b\n  ```\n\n```sh run\necho x\n```\n\n```text output\nx\n```\nprose\n```text output\ny\n```\n"
	fs := parseFences(doc)
	if len(fs) != 4 {
		t.Fatalf("%d fences, want 4", len(fs))
	}
	script, want := splitConsole(fs[0].lines)
	if script != "echo a \\\n  b" || want != "a b" {
		t.Errorf("console block: script %q, output %q", script, want)
	}
	if fs[1].next != fs[2] || fs[2].next != nil {
		t.Errorf("output blocks: the sh block's next is %v, the output's %v", fs[1].next, fs[2].next)
	}
}
