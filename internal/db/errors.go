package db

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// The sentinels PostgreSQL's errors become. This file is the only place
// that reads a SQLSTATE: above db, code asks errors.Is(err, db.ErrX), and
// package api turns the sentinels of the layers above into HTTP answers.
var (
	// ErrSerialization: the transaction still failed with a serialization
	// failure (40001) or a deadlock (40P01) when its retry budget ran out.
	ErrSerialization = errors.New("transaction kept conflicting with concurrent ones")
	// ErrUniqueViolation: a write hit a unique index (23505).
	ErrUniqueViolation = errors.New("unique constraint violated")
	// ErrLockNotHeld: a fenced write matched no row and assert_lock_held
	// (migration 000008) raised PK001: the caller's lock was taken over.
	ErrLockNotHeld = errors.New("fenced write: the caller no longer holds the lock")
)

// translate wraps a PostgreSQL error with its sentinel; the PgError stays
// in the chain, for the logs. Other errors are returned as they are.
func translate(err error) error {
	var pgErr *pgconn.PgError
	if err == nil || errors.Is(err, ErrSerialization) || !errors.As(err, &pgErr) {
		return err
	}
	switch pgErr.Code {
	case "23505":
		return fmt.Errorf("%w: %w", ErrUniqueViolation, err)
	case "PK001":
		return fmt.Errorf("%w: %w", ErrLockNotHeld, err)
	}
	return err
}

// isSerializationFailure tells whether err means "run the transaction again".
func isSerializationFailure(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "40001" || pgErr.Code == "40P01")
}
