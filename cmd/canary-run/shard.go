package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/tenantcanary/tenantcanary/certificate"
	"github.com/tenantcanary/tenantcanary/scenarios"
)

// shardSel is the slice of the catalog one shard runs.
type shardSel struct {
	certificate.Shard
	IDs []string // its scenarios, in catalog order
	Run string   // a --run expression selecting exactly IDs
}

// shardRun picks shard "K/N" of the scenarios run selects ("" = all): the
// scenarios at positions K-1, K-1+N, K-1+2N, ... in catalog order. The
// slices of 1/N..N/N are disjoint, cover the selection and depend on
// nothing but the catalog, so N machines can run them side by side.
func shardRun(run, spec string) (shardSel, error) {
	k, n, err := parseShard(spec)
	if err != nil {
		return shardSel{}, err
	}
	cat := scenarios.Default()
	specs := cat.All()
	if run != "" {
		if specs, err = cat.Match(run); err != nil {
			return shardSel{}, err
		}
	}
	if n > len(specs) {
		return shardSel{}, fmt.Errorf("--shard %s: the selection has %d scenarios, fewer than %d shards", spec, len(specs), n)
	}
	sel := shardSel{Shard: certificate.Shard{K: k, N: n, Run: run}}
	for i := k - 1; i < len(specs); i += n {
		sel.IDs = append(sel.IDs, specs[i].ID)
	}
	quoted := make([]string, len(sel.IDs))
	for i, id := range sel.IDs {
		quoted[i] = regexp.QuoteMeta(id)
	}
	sel.Run = "^(?:" + strings.Join(quoted, "|") + ")$"
	return sel, nil
}

func parseShard(spec string) (k, n int, err error) {
	ks, ns, ok := strings.Cut(spec, "/")
	k, kerr := strconv.Atoi(ks)
	n, nerr := strconv.Atoi(ns)
	if !ok || kerr != nil || nerr != nil || n < 1 || k < 1 || k > n {
		return 0, 0, fmt.Errorf("--shard %q: want K/N with 1 <= K <= N, e.g. 2/3", spec)
	}
	return k, n, nil
}
