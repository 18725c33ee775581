// Package pgtest gives tests a PostgreSQL database of their own: a fresh schema of the CORRAL_TEST_POSTGRES
// database, dropped when the test ends. Without CORRAL_TEST_POSTGRES the test is skipped with the reason, or
// fails when CI is set (CI requires PostgreSQL).
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// BaseDSN returns CORRAL_TEST_POSTGRES, or skips the test (fails it under CI) when it is not set.
func BaseDSN(t testing.TB) string {
	t.Helper()
	dsn := os.Getenv("CORRAL_TEST_POSTGRES")
	if dsn == "" {
		if os.Getenv("CI") != "" {
			t.Fatal("CORRAL_TEST_POSTGRES is not set: CI requires the postgres tests")
		}
		t.Skip("CORRAL_TEST_POSTGRES is not set (e.g. postgres://postgres@127.0.0.1:5432/test?sslmode=disable): " +
			"skipping postgres tests")
	}
	return dsn
}

// NewDSN creates a fresh schema, dropped when the test ends, and returns a DSN whose search_path selects it.
func NewDSN(t testing.TB) string {
	t.Helper()
	base := BaseDSN(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "corral_test_" + hex.EncodeToString(b[:])
	Exec(t, base, "CREATE SCHEMA "+schema)
	t.Cleanup(func() { Exec(t, base, "DROP SCHEMA "+schema+" CASCADE") })
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parse CORRAL_TEST_POSTGRES: %v", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// Exec runs one statement on its own connection to dsn.
func Exec(t testing.TB, dsn, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("admin connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("admin %q: %v", sql, err)
	}
}
