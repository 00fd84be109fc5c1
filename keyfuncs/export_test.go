package keyfuncs

// WithoutFastPath returns a copy of c whose KeyFrom always parses the peer
// address, for FuzzKeyFromFastPath to hold the fast path to.
func (c *ClientIP) WithoutFastPath() *ClientIP {
	d := *c
	d.fast4 = false
	return &d
}
