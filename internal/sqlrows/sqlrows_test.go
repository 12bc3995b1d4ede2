package sqlrows

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"
)

func TestTablesAndRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "t.db")+"?_pragma=journal_mode(WAL)")
	require.NoError(t, err)
	defer db.Close()
	for _, q := range []string{
		`CREATE TABLE b (id INTEGER PRIMARY KEY, txt TEXT, raw BLOB, n INTEGER)`,
		`CREATE TABLE "a ""quoted"" table" (v TEXT)`,
		`INSERT INTO b (txt, raw, n) VALUES ('one', x'00ff', 7), ('two', NULL, 8)`,
		`INSERT INTO "a ""quoted"" table" VALUES ('q')`,
	} {
		_, err := db.ExecContext(ctx, q)
		require.NoError(t, err, q)
	}
	tables, err := Tables(ctx, db)
	require.NoError(t, err)
	require.Equal(t, []string{`a "quoted" table`, "b"}, tables)

	type cell struct {
		row  int
		col  string
		data []byte
	}
	var got []cell
	var kept [][]byte
	require.NoError(t, Each(ctx, db, "b", func(row int, cols []string, vals []any) error {
		require.Equal(t, []string{"id", "txt", "raw", "n"}, cols)
		for i, v := range vals {
			if b, ok := Bytes(v); ok {
				got = append(got, cell{row, cols[i], b})
				kept = append(kept, b)
			}
		}
		return nil
	}))
	require.Equal(t, []cell{{1, "txt", []byte("one")}, {1, "raw", []byte{0, 0xff}}, {2, "txt", []byte("two")}}, got)
	require.Equal(t, []byte{0, 0xff}, kept[1], "a blob kept past its row is the row's own copy")

	var quoted []string
	require.NoError(t, Each(ctx, db, `a "quoted" table`, func(_ int, _ []string, vals []any) error {
		b, _ := Bytes(vals[0])
		quoted = append(quoted, string(b))
		return nil
	}))
	require.Equal(t, []string{"q"}, quoted)

	stop := errors.New("stop")
	rows := 0
	err = Each(ctx, db, "b", func(int, []string, []any) error { rows++; return stop })
	require.ErrorIs(t, err, stop)
	require.Equal(t, 1, rows, "an error from fn ends the walk")
	require.Error(t, Each(ctx, db, "no such table", func(int, []string, []any) error { return nil }))
}

func TestBytes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		v    any
		want []byte
		ok   bool
	}{{"s", []byte("s"), true}, {"", []byte{}, true}, {[]byte{1}, []byte{1}, true}, {[]byte(nil), nil, true}, {int64(3), nil, false}, {nil, nil, false}, {1.5, nil, false}} {
		b, ok := Bytes(c.v)
		require.Equal(t, c.ok, ok, "%#v", c.v)
		require.Equal(t, c.want, b, "%#v", c.v)
	}
}
