package main

import (
	"testing"

	"github.com/ratekit/ratekit/examples/demo/internal/demotest"
)

// TestProgram runs every check of the demo's routes on Echo v5, and the same
// requests on this program and on the default one, which must answer
// alike (demotest.Framework).
func TestProgram(t *testing.T) { demotest.Framework(t, program) }
