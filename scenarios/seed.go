package scenarios

import (
	"crypto/rand"
	"encoding/binary"
	"hash/fnv"
	mrand "math/rand/v2"

	"github.com/tenantcanary/tenantcanary/tenants"
)

// DrawSeed draws a fresh non-zero run seed.
func DrawSeed() uint64 {
	for {
		var b [8]byte
		_, _ = rand.Read(b[:])
		if s := binary.LittleEndian.Uint64(b[:]); s != 0 {
			return s
		}
	}
}

// scenarioRand is the random source of one scenario of a run: the run's
// seed and the scenario's ID, so each scenario gets its own orders and a
// replay with the same seed gets the same ones, whatever else runs.
func scenarioRand(seed uint64, id string) *mrand.Rand {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return mrand.New(mrand.NewPCG(seed, h.Sum64()))
}

// permuted returns ts in the order the scenario's seed gives: the order
// every phase visits the tenants in (who goes first, who follows the
// launch profile), so a leak that depends on order is met by some seed.
func (e *Env) permuted(ts []*tenants.Tenant) []*tenants.Tenant {
	out := append([]*tenants.Tenant(nil), ts...)
	if e.Rand != nil {
		e.Rand.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	}
	return out
}

// Shuffled returns ts in a fresh order drawn from the scenario's seed.
func (e *Env) Shuffled(ts []*tenants.Tenant) []*tenants.Tenant { return e.permuted(ts) }
