package scenarios

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestShareFindingsOnlyWhenTheShareGrows(t *testing.T) {
	t.Parallel()
	one := spreadPeak{Conns: 1, Sessions: 32, Peak: 4}
	assert.Empty(t, shareFindings("alpha", []spreadPeak{one, {Conns: 8, Sessions: 4, Peak: 4}}))
	assert.Empty(t, shareFindings("alpha", []spreadPeak{one, {Conns: 8, Sessions: 4, Peak: 3}}), "fewer at once is no growth")
	assert.Empty(t, shareFindings("alpha", []spreadPeak{one}), "nothing to compare with")
	fs := shareFindings("alpha", []spreadPeak{one, {Conns: 8, Sessions: 4, Peak: 16}})
	require.Len(t, fs, 1)
	assert.Equal(t, "availability: alpha spread turns at its provider: alpha's turns in flight grew from 4 over 1 connection to 16 over 8 connections: its share grows with its connections", fs[0].String())
}

// The gate lets a wave go once all the phase's requests are held, and
// counts the most held at once.
func TestShareGateCountsAWave(t *testing.T) {
	t.Parallel()
	g := &shareGate{quiet: time.Minute} // only want lets these go
	g.start(3)
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() { // ends when the wave goes
			defer wg.Done()
			g.hold()
		}()
	}
	wg.Wait()
	arrived, peak := g.counts()
	assert.Equal(t, 3, arrived)
	assert.Equal(t, 3, peak)
	g.close()
	g.hold() // a closed gate holds nothing
}

// A wave with fewer than the phase's requests goes once none arrived for
// quiet.
func TestShareGateLetsAQuietWaveGo(t *testing.T) {
	t.Parallel()
	g := &shareGate{quiet: 20 * time.Millisecond}
	defer g.close()
	g.start(10)
	g.hold()
	_, peak := g.counts()
	assert.Equal(t, 1, peak)
}
