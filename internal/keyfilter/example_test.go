package keyfilter_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/example/payments/internal/keyfilter"
)

// The claim asks the filter first: "definitely new" goes straight to the
// insert, "maybe seen" takes the careful lookup.
func Example() {
	filter, err := keyfilter.New(keyfilter.Config{TTL: 24 * time.Hour, ExpectedKeysPerSlice: 1000})
	if err != nil {
		panic(err)
	}
	// At start-up, the keys still alive (see ScanRows for pgx rows).
	stored := []keyfilter.Row{{UserID: 1, Key: "order-17", LiveFrom: time.Now().Add(-time.Hour)}}
	if _, err := filter.Rebuild(context.Background(), func(yield func(keyfilter.Row, error) bool) {
		for _, r := range stored {
			if !yield(r, nil) {
				return
			}
		}
	}); err != nil {
		panic(err)
	}

	claim := func(userID int64, key string) {
		if filter.CheckAndAdd(userID, key) {
			fmt.Printf("%d %s: maybe seen, look it up\n", userID, key)
			return
		}
		fmt.Printf("%d %s: definitely new, insert\n", userID, key)
	}
	claim(1, "order-17") // stored before the restart
	claim(1, "order-18")
	claim(1, "order-18") // the client's retry
	claim(2, "order-17") // keys are per user
	// Output:
	// 1 order-17: maybe seen, look it up
	// 1 order-18: definitely new, insert
	// 1 order-18: maybe seen, look it up
	// 2 order-17: definitely new, insert
}

// fakeRows stands in for pgx.Rows.
type fakeRows struct {
	rows []keyfilter.Row
	err  error
}

func (r *fakeRows) Next() bool { return len(r.rows) > 0 }
func (r *fakeRows) Err() error { return r.err }
func (r *fakeRows) Scan(dest ...any) error {
	*dest[0].(*int64), *dest[1].(*string), *dest[2].(*time.Time) = r.rows[0].UserID, r.rows[0].Key, r.rows[0].LiveFrom
	r.rows = r.rows[1:]
	return nil
}

// Rebuild streams the live keys from pgx rows (here a stand-in) without
// loading them whole:
//
//	rows, err := pool.Query(ctx, liveKeysQuery) // user_id, idempotency_key, created_at WHERE expires_at > now()
//	defer rows.Close()
//	st, err := filter.Rebuild(ctx, keyfilter.ScanRows(rows))
func ExampleScanRows() {
	filter, err := keyfilter.New(keyfilter.Config{ExpectedKeysPerSlice: 1000})
	if err != nil {
		panic(err)
	}
	now := time.Now()
	rows := &fakeRows{rows: []keyfilter.Row{
		{UserID: 1, Key: "a", LiveFrom: now.Add(-2 * time.Hour)},
		{UserID: 1, Key: "b", LiveFrom: now.Add(-25 * time.Hour)},
		{UserID: 2, Key: "a", LiveFrom: now},
	}}
	st, err := filter.Rebuild(context.Background(), keyfilter.ScanRows(rows))
	fmt.Printf("%+v %v\n", st, err)

	_, err = filter.Rebuild(context.Background(), keyfilter.ScanRows(&fakeRows{err: errors.New("conn closed")}))
	fmt.Println(err)
	// Output:
	// {Added:2 Expired:1} <nil>
	// keyfilter: reading keys: conn closed
}
