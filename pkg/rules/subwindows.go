package rules

import (
	"fmt"

	yaml "go.yaml.in/yaml/v3"

	"github.com/envoy-rls/envoy-rls/pkg/algo"
)

// subWindows reads sub_windows, the number of sub-windows a
// sliding_window counts its period in: algo.DefaultSubWindowsFor when
// absent, 1 for the two-window estimate. Other algorithms take none (0). alg is 0
// when it is bad; sub_windows is then not judged against it.
func (p *parser) subWindows(f map[string]*yaml.Node, path string, alg algo.Algorithm, period int64) (int64, bool) {
	sn, has := f["sub_windows"]
	if !has {
		return algo.DefaultSubWindowsFor(alg, period), true
	}
	want := fmt.Sprintf("an integer 1..%d; 1 is the two-window estimate", algo.MaxSubWindows)
	v, ok := p.integer(sn, path+".sub_windows", 1, algo.MaxSubWindows, want)
	if ok && alg != 0 && alg != algo.SlidingWindow {
		p.errorf(sn.Line, path+".sub_windows", "set for algorithm %s (want sub_windows only with sliding_window)", alg)
		return 0, false
	}
	return v, ok
}
