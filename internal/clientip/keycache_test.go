package clientip_test

import (
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"

	"github.com/ratekit/ratekit/internal/clientip"
	"github.com/ratekit/ratekit/keyfuncs"
)

// wantKey is the key of the client a, formatted without ClientIP: the
// IPv4 address, or the /64 of an IPv6 one, unmapped and without zone.
func wantKey(a netip.Addr) string { return wantKeyBits(a, 64) }

// wantKeyBits is wantKey for IPv6 prefixes of bits.
func wantKeyBits(a netip.Addr, bits int) string {
	a = a.WithZone("").Unmap()
	if a.Is4() {
		return a.String()
	}
	return netip.PrefixFrom(a, bits).Masked().String()
}

// randomAddr returns an IPv4, IPv4-mapped, IPv6 or zoned IPv6 address.
func randomAddr(r *rand.Rand) netip.Addr {
	var b [16]byte
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	switch r.IntN(4) {
	case 0:
		return netip.AddrFrom4([4]byte(b[:4]))
	case 1:
		return netip.AddrFrom16(netip.AddrFrom4([4]byte(b[:4])).As16()) // ::ffff:a.b.c.d
	case 2:
		return netip.AddrFrom16(b).WithZone("eth0")
	}
	return netip.AddrFrom16(b)
}

// TestKeyAddrHotClient: the key of a client asked for again and again is
// kept, and costs no allocation, for IPv4 addresses given as netip.Addr
// (Fiber's peers) and IPv6 peers as text.
func TestKeyAddrHotClient(t *testing.T) {
	c := clientip.NewPeer()
	v4 := netip.MustParseAddr("192.0.2.1")
	mapped := netip.MustParseAddr("::ffff:192.0.2.2")
	for _, tc := range []struct {
		name string
		key  func() (string, error)
		want string
	}{
		{"IPv4", func() (string, error) { return c.KeyAddr(v4) }, "192.0.2.1"},
		{"IPv4-mapped", func() (string, error) { return c.KeyAddr(mapped) }, "192.0.2.2"},
		{"IPv6 peer", func() (string, error) { return c.KeyFrom("[2001:db8::1]:4711", nil) }, "2001:db8::/64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 2 { // the second miss keeps the key
				if k, err := tc.key(); err != nil || k != tc.want {
					t.Fatalf("key %q (%v), want %q", k, err, tc.want)
				}
			}
			allocs := testing.AllocsPerRun(100, func() {
				if k, err := tc.key(); err != nil || k != tc.want {
					t.Fatalf("key %q (%v), want %q", k, err, tc.want)
				}
			})
			if allocs != 0 {
				t.Errorf("a hot client's key: %v allocs", allocs)
			}
		})
	}
}

// TestKeyCacheFlood: addresses seen once each, many more than the table
// has slots, keep nothing; the keys of a mix of hot and one-off clients,
// in every form of address, are those that formatting gives; at most
// KeySlots keys are kept, whatever the traffic.
func TestKeyCacheFlood(t *testing.T) {
	c := clientip.NewPeer()
	r := rand.New(rand.NewPCG(1, 2))
	for range 50_000 {
		a := randomAddr(r)
		if k, _ := c.KeyAddr(a); k != wantKey(a) {
			t.Fatalf("KeyAddr(%v) = %q, want %q", a, k, wantKey(a))
		}
	}
	if n := c.KeptKeys(); n != 0 {
		t.Fatalf("%d keys kept of 50,000 addresses seen once", n)
	}
	hot := make([]netip.Addr, 3*clientip.KeySlots)
	for i := range hot {
		hot[i] = randomAddr(r)
	}
	for i := range 200_000 {
		a := hot[r.IntN(len(hot))]
		if i%3 == 0 {
			a = randomAddr(r)
		}
		if k, _ := c.KeyAddr(a); k != wantKey(a) {
			t.Fatalf("request %d: KeyAddr(%v) = %q, want %q", i, a, k, wantKey(a))
		}
	}
	if n := c.KeptKeys(); n == 0 || n > clientip.KeySlots {
		t.Fatalf("%d keys kept, want 1 to %d", n, clientip.KeySlots)
	}
}

// TestKeyCacheConcurrent: goroutines asking for hot and one-off clients
// at once each get the right key. Run with -race.
func TestKeyCacheConcurrent(t *testing.T) {
	c := clientip.NewPeer()
	hot := make([]netip.Addr, 64)
	for i := range hot {
		hot[i] = netip.AddrFrom4([4]byte{198, 51, 100, byte(i)})
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for i := range 20_000 {
				a := hot[(g+i)%len(hot)]
				if i%4 == 0 {
					a = randomAddr(r)
				}
				if k, err := c.KeyAddr(a); err != nil || k != wantKey(a) {
					t.Errorf("goroutine %d: KeyAddr(%v) = %q (%v), want %q", g, a, k, err, wantKey(a))
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestKeyCachePrefixLength: each ClientIP keeps the keys of its own
// prefix length; hot IPv6 clients asked of two ClientIPs of different
// lengths, as text and as netip.Addr, get their own.
func TestKeyCachePrefixLength(t *testing.T) {
	c48, _ := clientip.New(keyfuncs.IPv6Prefix(48))
	c128, _ := clientip.New(keyfuncs.IPv6Prefix(128))
	r := rand.New(rand.NewPCG(3, 4))
	hot := make([]netip.Addr, 32)
	for i := range hot {
		hot[i] = randomAddr(r)
	}
	for i := range 10_000 {
		a := hot[i%len(hot)]
		for _, tc := range []struct {
			c    *clientip.ClientIP
			bits int
		}{{c48, 48}, {c128, 128}} {
			k, err := tc.c.KeyAddr(a)
			if i%2 == 1 {
				k, err = tc.c.KeyFrom(netip.AddrPortFrom(a, 4711).String(), nil)
			}
			if err != nil || k != wantKeyBits(a, tc.bits) {
				t.Fatalf("/%d, request %d: key of %v %q (%v), want %q", tc.bits, i, a, k, err, wantKeyBits(a, tc.bits))
			}
		}
	}
	if c48.KeptKeys() == 0 || c128.KeptKeys() == 0 {
		t.Fatalf("kept keys: /48 %d, /128 %d", c48.KeptKeys(), c128.KeptKeys())
	}
}

// TestKeyCacheHostsOfOnePrefix: an IPv6 client that changes its address
// within its /64 at every request (privacy addresses, or on purpose) has
// one key, kept on its second request and then free; and its addresses
// take one slot, so that a hot IPv4 client's key stays kept.
func TestKeyCacheHostsOfOnePrefix(t *testing.T) {
	c := clientip.NewPeer()
	r := rand.New(rand.NewPCG(5, 6))
	host := func() netip.Addr {
		b := netip.MustParseAddr("2001:db8:0:7::").As16()
		for i := 8; i < 16; i++ {
			b[i] = byte(r.Uint32())
		}
		return netip.AddrFrom16(b)
	}
	v4 := netip.MustParseAddr("192.0.2.9")
	const want = "2001:db8:0:7::/64"
	for range 2 {
		if k, err := c.KeyAddr(v4); err != nil || k != "192.0.2.9" {
			t.Fatalf("key %q (%v)", k, err)
		}
		if k, err := c.KeyAddr(host()); err != nil || k != want {
			t.Fatalf("key %q (%v), want %q", k, err, want)
		}
	}
	if n := c.KeptKeys(); n != 2 {
		t.Fatalf("%d keys kept, want the IPv4 client's and the prefix's", n)
	}
	hosts := make([]netip.Addr, 1000)
	for i := range hosts {
		hosts[i] = host()
	}
	i := 0
	allocs := testing.AllocsPerRun(len(hosts)-1, func() {
		k, err := c.KeyAddr(hosts[i])
		i++
		if err != nil || k != want {
			t.Fatalf("key %q (%v), want %q", k, err, want)
		}
		if k, _ := c.KeyAddr(v4); k != "192.0.2.9" {
			t.Fatalf("key %q of 192.0.2.9", k)
		}
	})
	if allocs != 0 {
		t.Errorf("a client changing hosts within its /64: %v allocs per request", allocs)
	}
	if n := c.KeptKeys(); n != 2 {
		t.Fatalf("%d keys kept after 1,000 hosts of one /64, want 2", n)
	}
}
