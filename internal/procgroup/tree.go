package procgroup

// Descendants lists the live descendants of pid (children, their
// children, ...), read from /proc: a child subreaper uses it to end every
// process it adopted, whatever session or group they moved to.
func Descendants(pid int) []int {
	children := map[int][]int{}
	for _, p := range pids() {
		if st, ok := readStat(p); ok && st.live() {
			children[st.ppid] = append(children[st.ppid], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, c := range children[cur] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}
