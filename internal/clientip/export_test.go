package clientip

// WithoutFastPath returns a copy of c whose KeyFrom always parses the peer
// address, for FuzzKeyFromFastPath to hold the fast path to.
func (c *ClientIP) WithoutFastPath() *ClientIP {
	return &ClientIP{trusted4: c.trusted4, trusted6: c.trusted6, v6bits: c.v6bits, header: c.header, kind: c.kind}
}

// KeptKeys returns the number of keys c keeps for recent clients.
func (c *ClientIP) KeptKeys() int {
	kc := c.keys.Load()
	if kc == nil {
		return 0
	}
	n := 0
	for i := range kc.slots {
		if kc.slots[i].kept.Load() != nil {
			n++
		}
	}
	return n
}

// KeySlots is the number of keys a ClientIP keeps at most.
const KeySlots = keySlots
