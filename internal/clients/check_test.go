package clients

import (
	"strings"
	"testing"
)

// TestDescriptorFlag parses check's -d, including values that hold commas.
func TestDescriptorFlag(t *testing.T) {
	type kv struct{ k, v string }
	tests := []struct {
		in      string
		want    []kv
		wantErr string
	}{
		{in: "a=1", want: []kv{{"a", "1"}}},
		{in: "a=1,b=2", want: []kv{{"a", "1"}, {"b", "2"}}},
		{in: `accept=text/html\,application/json`, want: []kv{{"accept", "text/html,application/json"}}},
		{in: `roles=a\,b,user=x`, want: []kv{{"roles", "a,b"}, {"user", "x"}}},
		{in: `path=C:\\dir`, want: []kv{{"path", `C:\dir`}}},
		{in: "q=a=b", want: []kv{{"q", "a=b"}}},
		{in: "a=", want: []kv{{"a", ""}}},
		{in: `a=1\`, wantErr: "lone backslash"},
		{in: "a=1,,b=2", wantErr: `entry "": want key=value`},
		{in: "=1", wantErr: "want key=value"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			var d descriptorFlags
			err := d.Set(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Set(%q) error %v, want %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Set(%q): %v", tt.in, err)
			}
			var got []kv
			for _, e := range d[0].GetEntries() {
				got = append(got, kv{e.GetKey(), e.GetValue()})
			}
			if len(got) != len(tt.want) {
				t.Fatalf("Set(%q) = %v, want %v", tt.in, got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("Set(%q) = %v, want %v", tt.in, got, tt.want)
				}
			}
		})
	}
}
