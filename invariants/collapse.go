package invariants

// Collapse folds repeated findings into one each, in order of first
// occurrence. Findings with a Place are repeats when their invariant,
// place, owner and tenant are the same: one hole a route shows to many
// calls (every guessed id, every form, the refusal that was not one and
// the data it returned) is one finding, whose Count says how many were
// folded into it (each one's own Count counted). Other findings are
// repeats when their String is the same, and are dropped, as Dedup always
// did. Count stays 0 on a finding seen once, so a list without repeats is
// unchanged.
func Collapse(fs []Finding) []Finding {
	at := make(map[string]int, len(fs)) // key -> index in out
	out := make([]Finding, 0, len(fs))
	for _, f := range fs {
		k := collapseKey(f)
		i, seen := at[k]
		if !seen {
			at[k] = len(out)
			out = append(out, f)
			continue
		}
		if f.Place != "" {
			out[i].Count = countOf(out[i]) + countOf(f)
		}
	}
	return out
}

func countOf(f Finding) int {
	if f.Count < 1 {
		return 1
	}
	return f.Count
}

func collapseKey(f Finding) string {
	if f.Place != "" {
		return "place\x00" + string(f.Invariant) + "\x00" + f.Place + "\x00" + f.Owner + "\x00" + f.Tenant
	}
	f.Count = 0
	return "text\x00" + f.String()
}
