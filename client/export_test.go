package client

import (
	"context"
	"time"
)

// WithFakeClock makes the client measure its retry budget with now and
// wait with sleep, so that tests of long waits take none.
func WithFakeClock(now func() time.Time, sleep func(ctx context.Context, d time.Duration) error) Option {
	return func(c *Client) { c.clock = fakeClock{now, sleep} }
}

type fakeClock struct {
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error
}

func (f fakeClock) Now() time.Time                                   { return f.now() }
func (f fakeClock) Sleep(ctx context.Context, d time.Duration) error { return f.sleep(ctx, d) }
