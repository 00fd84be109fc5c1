package limits_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ratekit/ratekit/core"
	"github.com/ratekit/ratekit/redisstore/internal/limits"
)

func params(t *testing.T, l core.Limit) core.Params {
	t.Helper()
	p, err := l.Params(time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestChecks(t *testing.T) {
	if err := limits.CheckCount(0); !errors.Is(err, core.ErrInvalidLimit) {
		t.Errorf("no limits: %v", err)
	}
	if err := limits.CheckCount(core.MaxLimits + 1); !errors.Is(err, core.ErrInvalidLimit) {
		t.Errorf("too many limits: %v", err)
	}
	if err := limits.CheckCount(core.MaxLimits); err != nil {
		t.Errorf("the most limits: %v", err)
	}

	a := params(t, core.Limit{Name: "a", Rate: core.PerMinute(1)})
	b := params(t, core.Limit{Name: "a", Rate: core.PerHour(5)})
	c := params(t, core.Limit{Name: "a", Algorithm: core.TokenBucket, Rate: core.PerHour(5)})
	if err := limits.CheckDistinct([]core.Params{a}, &b); !errors.Is(err, core.ErrInvalidLimit) {
		t.Errorf("two limits with one name and algorithm: %v", err)
	}
	if err := limits.CheckDistinct([]core.Params{a}, &c); err != nil {
		t.Errorf("one name, two algorithms: %v", err)
	}

	short := params(t, core.Limit{Algorithm: core.FixedWindow, Rate: core.Rate{Count: 1, Period: 999 * time.Microsecond}})
	block := params(t, core.Limit{Algorithm: core.FixedWindow, Rate: core.Rate{Count: 0, Period: 999 * time.Microsecond}})
	bucket := params(t, core.Limit{Algorithm: core.TokenBucket, Rate: core.Rate{Count: 1, Period: 999 * time.Microsecond}})
	if err := limits.CheckWindow(&short); !errors.Is(err, core.ErrInvalidLimit) {
		t.Errorf("a window under a millisecond: %v", err)
	}
	for _, p := range []core.Params{a, block, bucket} {
		if err := limits.CheckWindow(&p); err != nil {
			t.Errorf("%s: %v", p.ID, err)
		}
	}

	ds := make([]core.Decision, 2)
	if err := limits.CheckRequest(ds[:1], 2, 1, 10); err == nil {
		t.Error("fewer decisions than limits: no error")
	}
	for _, cost := range []int{-1, 11} {
		if err := limits.CheckRequest(ds, 2, cost, 10); !errors.Is(err, core.ErrCostExceedsLimit) {
			t.Errorf("cost %d: %v", cost, err)
		}
	}
	if err := limits.CheckRequest(ds, 2, 10, 10); err != nil {
		t.Errorf("a cost of the whole capacity: %v", err)
	}
	if err := limits.CheckInspect(ds, make([]core.Grant, 1), 2); err == nil {
		t.Error("fewer grants than limits: no error")
	}
}

func TestBlock(t *testing.T) {
	p := params(t, core.Limit{Name: "blocked", Rate: core.Rate{Count: 0, Period: time.Hour}})
	d := core.Decision{Allowed: true, Remaining: 3}
	limits.Block(&p, &d)
	want := core.Decision{Name: "blocked", Window: time.Hour, ResetAfter: time.Hour, RetryAfter: time.Hour}
	if d != want {
		t.Errorf("%+v, want %+v", d, want)
	}
}
