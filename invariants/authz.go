package invariants

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// OperatorOwner owns the operator's canaries.
const OperatorOwner = "operator"

var trailingNumber = regexp.MustCompile(`^(.*?)(\d+)$`)

// PredictableIDs reports identifiers (of kind, e.g. "live session") a
// tenant could guess from its own: ids that differ from another only in a
// trailing number within 1000 of it (a counter), or that are shorter than
// 8 characters. One finding per kind, with two ids as evidence.
func PredictableIDs(kind string, ids []string) []Finding {
	groups := map[string][]int64{}
	example := map[string][]string{}
	for _, id := range ids {
		if len(id) < 8 {
			return []Finding{{Invariant: Authz, Where: Where{Label: kind + " ids"},
				Detail: fmt.Sprintf("%s id %q is %d characters: guessable", kind, id, len(id))}}
		}
		m := trailingNumber.FindStringSubmatch(id)
		if m == nil || len(m[2]) > 12 {
			continue
		}
		n, err := strconv.ParseInt(m[2], 10, 64)
		if err != nil {
			continue
		}
		groups[m[1]] = append(groups[m[1]], n)
		example[m[1]] = append(example[m[1]], id)
	}
	prefixes := make([]string, 0, len(groups))
	for p := range groups {
		prefixes = append(prefixes, p)
	}
	sort.Strings(prefixes)
	for _, p := range prefixes {
		ns := groups[p]
		if len(ns) < 2 {
			continue
		}
		sorted := append([]int64(nil), ns...)
		sort.Slice(sorted, func(i, j int) bool { return sorted[i] < sorted[j] })
		for i := 1; i < len(sorted); i++ {
			if d := sorted[i] - sorted[i-1]; d > 0 && d < 1000 {
				return []Finding{{Invariant: Authz, Where: Where{Label: kind + " ids"},
					Detail: fmt.Sprintf("%s ids follow a counter (%s): a tenant can guess another's", kind, strings.Join(example[p][:min(3, len(example[p]))], ", "))}}
			}
		}
	}
	return nil
}

// Neighbours are the ids next to id when it ends in a number (id-1, id+1,
// same width); nil otherwise.
func Neighbours(id string) []string {
	m := trailingNumber.FindStringSubmatch(id)
	if m == nil || len(m[2]) > 12 {
		return nil
	}
	n, err := strconv.ParseInt(m[2], 10, 64)
	if err != nil {
		return nil
	}
	var out []string
	for _, d := range []int64{-1, 1, 2} {
		if v := n + d; v >= 0 {
			out = append(out, m[1]+fmt.Sprintf("%0*d", len(m[2]), v))
		}
	}
	return out
}
