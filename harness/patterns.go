package harness

import (
	"regexp"
	"sync"
)

// patterns holds the regexps a target file names (a route's success, a
// probe plugin's host command line), compiled once each: scenarios
// running at once share one target's routes and plugin, so nothing is
// compiled into them on first use (CI's data race).
var patterns sync.Map // pattern -> *regexp.Regexp, nil when it does not compile

// compiled is pattern compiled, or nil when it does not compile (the
// target's validation names a bad pattern).
func compiled(pattern string) *regexp.Regexp {
	if v, ok := patterns.Load(pattern); ok {
		return v.(*regexp.Regexp)
	}
	re, _ := regexp.Compile(pattern)
	v, _ := patterns.LoadOrStore(pattern, re)
	return v.(*regexp.Regexp)
}
