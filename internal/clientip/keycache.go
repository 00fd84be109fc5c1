package clientip

import (
	"encoding/binary"
	"net/netip"
	"sync/atomic"
)

// keyCache keeps the keys of recent clients by address (for IPv6, the
// first address of the client's prefix), so that a client
// whose key is asked for again and again costs no allocation: formatting
// a key allocates its string. That is every request of a hot client on
// an adapter whose framework gives the peer as a net.IP (Fiber), and of
// an IPv6 client anywhere.
//
// It is a table of keySlots slots, by a hash of the address. A key is
// kept when its address misses its slot twice with no other address
// missing it in between, so that a flood
// of addresses each seen once keeps nothing and costs what it costs
// without the table; a kept key is replaced the same way by another
// address of its slot. Memory is bounded by the slots, whatever the
// traffic: 16 KiB, and about 80 bytes per kept key.
type keyCache struct {
	slots [keySlots]keySlot
}

const (
	keyBits  = 10
	keySlots = 1 << keyBits
)

type keySlot struct {
	kept atomic.Pointer[keptKey]
	// seen is the hash of the address that last missed this slot, or
	// zero: a hint, which a collision of hashes at worst makes keep a key.
	seen atomic.Uint64
}

// keptKey is the key of the client at addr.
type keptKey struct {
	addr netip.Addr
	key  string
}

// lookup returns the key kept for a, or the slot of a and the hash to
// keep a key there with keep.
func (kc *keyCache) lookup(a netip.Addr) (key string, s *keySlot, h uint64) {
	b := a.As16()
	hi, lo := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	h = (hi*0x9e3779b97f4a7c15 ^ lo) * 0xbf58476d1ce4e5b9 // multiplicative mixing; the top bits pick the slot
	s = &kc.slots[h>>(64-keyBits)]
	if k := s.kept.Load(); k != nil && k.addr == a {
		return k.key, s, h
	}
	return "", s, h | 1 // never zero
}

// keep records that a, of hash h, missed its slot s with the key key, and
// keeps the key when a missed it last time too.
func (s *keySlot) keep(a netip.Addr, h uint64, key string) {
	if s.seen.Swap(h) == h {
		s.kept.Store(&keptKey{addr: a, key: key})
	}
}
