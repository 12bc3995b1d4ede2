package flood

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"
)

func TestZZCalib(t *testing.T) {
	if os.Getenv("CALIB") == "" {
		t.Skip()
	}
	for _, work := range []int{512 << 10, 2 << 20, 4 << 20} {
		c, err := StartControl(context.Background(), ControlOptions{Work: work})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		s, err := c.Sample(ctx, 50*time.Millisecond)
		cancel()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("work %dKiB: n=%d p50=%v p90=%v\n", work>>10, len(s), q(s, 0.5), q(s, 0.9))
	}
}

func q(ds []time.Duration, f float64) time.Duration {
	s := append([]time.Duration(nil), ds...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s[int(f*float64(len(s)-1))]
}
