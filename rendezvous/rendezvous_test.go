package rendezvous

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"dflash/internal/testseed"
)

// randomID returns an id of random bytes; the seed is logged.
func randomID(t *testing.T) UniqueID {
	t.Helper()
	r := testseed.New(t)
	var id UniqueID
	for i := range id {
		id[i] = byte(r.Uint32())
	}
	return id
}

// logWatch is a slog handler that forwards each message to a channel (and
// drops it when nobody listens), so tests can wait for the server to notice
// something.
type logWatch struct{ ch chan string }

func newLogWatch() *logWatch                                 { return &logWatch{ch: make(chan string, 64)} }
func (w *logWatch) Enabled(context.Context, slog.Level) bool { return true }
func (w *logWatch) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *logWatch) WithGroup(string) slog.Handler            { return w }
func (w *logWatch) Handle(_ context.Context, r slog.Record) error {
	select {
	case w.ch <- r.Message:
	default:
	}
	return nil
}

// waitLog waits for a message containing s.
func (w *logWatch) waitLog(t *testing.T, s string) {
	t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case m := <-w.ch:
			if strings.Contains(m, s) {
				return
			}
		case <-timeout:
			t.Fatalf("server never logged %q", s)
		}
	}
}

// serve starts rank 0 on a free loopback port and returns its address and
// the channel its Serve result arrives on.
func serve(t *testing.T, cfg Config, id UniqueID) (string, <-chan error) {
	t.Helper()
	cfg.Addr, cfg.Rank = "127.0.0.1:0", 0
	s, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(context.Background(), id) }()
	return s.Addr(), done
}

func wait(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal("rendezvous did not end")
		return nil
	}
}

// receiveAll runs ReceiveID for ranks 1..nranks-1 in goroutines.
func receiveAll(cfg Config) ([]UniqueID, []error) {
	ids := make([]UniqueID, cfg.NRanks)
	errs := make([]error, cfg.NRanks)
	var wg sync.WaitGroup
	for r := 1; r < cfg.NRanks; r++ {
		wg.Go(func() {
			c := cfg
			c.Rank = r
			ids[r], errs[r] = ReceiveID(context.Background(), c)
		})
	}
	wg.Wait()
	return ids, errs
}

func TestExchangeGoroutines(t *testing.T) {
	for _, n := range []int{2, 3, 8} {
		t.Run(fmt.Sprintf("nranks=%d", n), func(t *testing.T) {
			id := randomID(t)
			cfg := Config{NRanks: n, Token: "job-42", Timeout: 10 * time.Second}
			addr, done := serve(t, cfg, id)
			cfg.Addr = addr
			ids, errs := receiveAll(cfg)
			if err := wait(t, done); err != nil {
				t.Fatalf("rank 0: %v", err)
			}
			for r := 1; r < n; r++ {
				if errs[r] != nil {
					t.Fatalf("rank %d: %v", r, errs[r])
				}
				if ids[r] != id {
					t.Fatalf("rank %d got id %x..., want %x...", r, ids[r][:8], id[:8])
				}
			}
		})
	}
}

// listen returns a listener on a free port of 127.0.0.1, failing t when
// there is none.
func listen(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// freeAddr returns an address of 127.0.0.1 that nothing listens on: a
// listener's, closed.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln := listen(t)
	defer ln.Close()
	return ln.Addr().String()
}

// TestClientsBeforeServer starts the other ranks before rank 0 listens:
// they retry until it does.
func TestClientsBeforeServer(t *testing.T) {
	addr := freeAddr(t)
	id := randomID(t)
	cfg := Config{Addr: addr, NRanks: 3, Timeout: 10 * time.Second}
	type res struct {
		ids  []UniqueID
		errs []error
	}
	got := make(chan res, 1)
	go func() { ids, errs := receiveAll(cfg); got <- res{ids, errs} }()
	time.Sleep(300 * time.Millisecond)
	out, err := Exchange(context.Background(), cfg, func() (UniqueID, error) { return id, nil })
	if err != nil {
		t.Fatalf("rank 0: %v", err)
	}
	if out != id {
		t.Fatal("rank 0 returned another id")
	}
	r := <-got
	for k := 1; k < 3; k++ {
		if r.errs[k] != nil || r.ids[k] != id {
			t.Errorf("rank %d: err %v, id match %v", k, r.errs[k], r.ids[k] == id)
		}
	}
}

func TestExchangeOneRank(t *testing.T) {
	id := randomID(t)
	out, err := Exchange(context.Background(), Config{NRanks: 1}, func() (UniqueID, error) { return id, nil })
	if err != nil || out != id {
		t.Fatalf("one rank: %v, same id %v", err, out == id)
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		cfg  Config
		want string
	}{
		{Config{Addr: "x:1", Rank: 2, NRanks: 2}, "rank 2 out of range for 2 ranks"},
		{Config{Addr: "x:1", Rank: -1, NRanks: 2}, "rank -1 out of range"},
		{Config{Addr: "x:1", NRanks: 0}, "nranks 0"},
		{Config{Rank: 1, NRanks: 2}, "no coordinator address"},
	}
	for _, c := range cases {
		t.Run(c.want, func(t *testing.T) {
			_, err := Exchange(context.Background(), c.cfg, func() (UniqueID, error) { return UniqueID{}, nil })
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
		})
	}
	if _, err := Listen(Config{Addr: "127.0.0.1:99999", NRanks: 2}); err == nil || !strings.Contains(err.Error(), "127.0.0.1:99999") {
		t.Errorf("Listen on a bad port: %v", err)
	}
}

// TestMismatch: a rank of the same job that disagrees on the job's shape
// ends the rendezvous on both sides with errors naming the address.
func TestMismatch(t *testing.T) {
	t.Run("wrong nranks", func(t *testing.T) {
		cfg := Config{NRanks: 2, Token: "t", Timeout: 10 * time.Second}
		addr, done := serve(t, cfg, randomID(t))
		_, err := ReceiveID(context.Background(), Config{Addr: addr, Rank: 1, NRanks: 3, Token: "t", Timeout: 5 * time.Second})
		if !errors.Is(err, ErrMismatch) || !errors.Is(err, ErrRejected) {
			t.Errorf("rank 1: err = %v, want a rejected mismatch", err)
		}
		for _, s := range []string{addr, "rank 1 of 3", "nranks 3", "rank 0 says 2"} {
			if err == nil || !strings.Contains(err.Error(), s) {
				t.Errorf("rank 1 error %v does not mention %q", err, s)
			}
		}
		serr := wait(t, done)
		if !errors.Is(serr, ErrMismatch) || !strings.Contains(fmt.Sprint(serr), "rank 0 of 2, coordinator "+addr) {
			t.Errorf("rank 0: err = %v", serr)
		}
	})
	raw := []struct {
		name string
		msg  message
		want string
	}{
		{"newer protocol version", message{Type: msgHello, Protocol: Protocol, Version: Version + 1, NRanks: 2, Rank: 1}, "protocol version 2"},
		{"rank 0 claimed twice", message{Type: msgHello, Protocol: Protocol, Version: Version, NRanks: 2, Rank: 0}, "rank 0 out of range 1..1"},
	}
	for _, c := range raw {
		t.Run(c.name, func(t *testing.T) {
			addr, done := serve(t, Config{NRanks: 2, Timeout: 10 * time.Second}, randomID(t))
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if err := writeMsg(conn, c.msg); err != nil {
				t.Fatal(err)
			}
			m, err := readMsg(conn)
			if err != nil || m.Type != msgReject || m.Code != codeMismatch {
				t.Errorf("reply %+v, %v; want a mismatch rejection", m, err)
			}
			if serr := wait(t, done); !errors.Is(serr, ErrMismatch) || !strings.Contains(serr.Error(), c.want) {
				t.Errorf("rank 0: err = %v, want mismatch mentioning %q", serr, c.want)
			}
		})
	}
}

// TestWrongTokenIsStray: a hello from another job is rejected without
// ending this job's rendezvous.
func TestWrongTokenIsStray(t *testing.T) {
	id := randomID(t)
	cfg := Config{NRanks: 2, Token: "ours", Timeout: 10 * time.Second}
	addr, done := serve(t, cfg, id)
	cfg.Addr = addr
	other := cfg
	other.Rank, other.Token = 1, "theirs"
	_, err := ReceiveID(context.Background(), other)
	if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "token") {
		t.Fatalf("other job's rank: err = %v, want a token rejection", err)
	}
	if strings.Contains(err.Error(), "ours") {
		t.Errorf("the rejection leaks rank 0's token: %v", err)
	}
	ids, errs := receiveAll(cfg)
	if errs[1] != nil || ids[1] != id {
		t.Fatalf("our rank 1: %v", errs[1])
	}
	if err := wait(t, done); err != nil {
		t.Fatalf("rank 0: %v", err)
	}
}

func TestDuplicateRank(t *testing.T) {
	w := newLogWatch()
	cfg := Config{NRanks: 3, Timeout: 10 * time.Second, Logger: slog.New(w)}
	addr, done := serve(t, cfg, randomID(t))
	cfg.Addr, cfg.Rank, cfg.Logger = addr, 1, nil
	first := make(chan error, 1)
	go func() { _, err := ReceiveID(context.Background(), cfg); first <- err }()
	w.waitLog(t, "rank joined")
	_, err := ReceiveID(context.Background(), cfg)
	if !errors.Is(err, ErrDuplicateRank) {
		t.Errorf("second rank 1: err = %v, want ErrDuplicateRank", err)
	}
	if err := <-first; !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "rank 0 gave up") {
		t.Errorf("first rank 1: err = %v, want rank 0's abort", err)
	}
	if serr := wait(t, done); !errors.Is(serr, ErrDuplicateRank) {
		t.Errorf("rank 0: err = %v", serr)
	}
}

func TestTimeouts(t *testing.T) {
	t.Run("rank 0 waits for a rank that never comes", func(t *testing.T) {
		w := newLogWatch()
		cfg := Config{NRanks: 3, Timeout: 3 * time.Second, Logger: slog.New(w)}
		addr, done := serve(t, cfg, randomID(t))
		cfg.Addr, cfg.Rank, cfg.Logger, cfg.Timeout = addr, 1, nil, 10*time.Second
		_, err := ReceiveID(context.Background(), cfg)
		if !errors.Is(err, ErrRejected) || !strings.Contains(err.Error(), "rank 0 gave up: timed out after 3s waiting for ranks [2] to join") {
			t.Errorf("rank 1: err = %v, want rank 0's give-up naming rank 2", err)
		}
		serr := wait(t, done)
		if !errors.Is(serr, ErrTimeout) || !strings.Contains(serr.Error(), "waiting for ranks [2] to join (joined: [0 1])") {
			t.Errorf("rank 0: err = %v", serr)
		}
	})
	t.Run("a rank waits for a rank 0 that never listens", func(t *testing.T) {
		addr := freeAddr(t)
		t0 := time.Now()
		_, err := ReceiveID(context.Background(), Config{Addr: addr, Rank: 1, NRanks: 2, Timeout: 700 * time.Millisecond})
		took := time.Since(t0)
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("err = %v, want ErrTimeout", err)
		}
		for _, s := range []string{"rank 1 of 2", addr, "connection refused", "attempts"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not mention %q", err, s)
			}
		}
		if took < 700*time.Millisecond || took > 5*time.Second {
			t.Errorf("gave up after %v, want about 700ms", took)
		}
	})
	t.Run("a silent peer is dropped", func(t *testing.T) {
		ln := listen(t)
		defer ln.Close()
		go func() { // accepts and never answers
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				defer c.Close()
			}
		}()
		_, err := ReceiveID(context.Background(), Config{Addr: ln.Addr().String(), Rank: 1, NRanks: 2, Timeout: 500 * time.Millisecond})
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("err = %v, want ErrTimeout", err)
		}
	})
}

// TestDroppedConnections covers connections that end early on either side.
func TestDroppedConnections(t *testing.T) {
	t.Run("strays and a rank that reconnects", func(t *testing.T) {
		id := randomID(t)
		w := newLogWatch()
		cfg := Config{NRanks: 3, Timeout: 10 * time.Second, Logger: slog.New(w)}
		addr, done := serve(t, cfg, id)
		// A connection that says nothing, one that speaks HTTP, and one
		// that joins as rank 2 and drops before the id is handed out.
		c1, _ := net.Dial("tcp", addr)
		c1.Close()
		c2, _ := net.Dial("tcp", addr)
		io.WriteString(c2, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
		w.waitLog(t, "never said hello")
		c3, _ := net.Dial("tcp", addr)
		writeMsg(c3, message{Type: msgHello, Protocol: Protocol, Version: Version, NRanks: 3, Rank: 2, Session: "gone"})
		w.waitLog(t, "rank joined")
		c3.Close()
		w.waitLog(t, "rank dropped before the id was handed out")
		c2.Close()
		cfg.Addr, cfg.Logger = addr, nil
		ids, errs := receiveAll(cfg)
		for r := 1; r < 3; r++ {
			if errs[r] != nil || ids[r] != id {
				t.Fatalf("rank %d after the drop: %v", r, errs[r])
			}
		}
		if err := wait(t, done); err != nil {
			t.Fatalf("rank 0: %v", err)
		}
	})
	t.Run("rank 0 drops the connection, then comes back", func(t *testing.T) {
		ln := listen(t)
		addr := ln.Addr().String()
		id := randomID(t)
		got := make(chan error, 1)
		go func() {
			out, err := ReceiveID(context.Background(), Config{Addr: addr, Rank: 1, NRanks: 2, Timeout: 10 * time.Second})
			if err == nil && out != id {
				err = errors.New("wrong id")
			}
			got <- err
		}()
		for range 2 { // read the hello, then hang up
			c, err := ln.Accept()
			if err != nil {
				t.Fatal(err)
			}
			if m, err := readMsg(c); err != nil || m.Type != msgHello {
				t.Fatalf("expected a hello, got %+v, %v", m, err)
			}
			c.Close()
		}
		ln.Close()
		s, err := Listen(Config{Addr: addr, NRanks: 2, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Serve(context.Background(), id); err != nil {
			t.Fatalf("rank 0: %v", err)
		}
		if err := <-got; err != nil {
			t.Fatalf("rank 1: %v", err)
		}
	})
	t.Run("a rank drops before acknowledging the id", func(t *testing.T) {
		cfg := Config{NRanks: 2, Timeout: 10 * time.Second}
		addr, done := serve(t, cfg, randomID(t))
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		writeMsg(c, message{Type: msgHello, Protocol: Protocol, Version: Version, NRanks: 2, Rank: 1})
		if m, err := readMsg(c); err != nil || m.Type != msgWelcome {
			t.Fatalf("expected the welcome, got %+v, %v", m, err)
		}
		c.Close()
		serr := wait(t, done)
		if !errors.Is(serr, ErrDropped) || !strings.Contains(serr.Error(), "rank 1") || !strings.Contains(serr.Error(), "before acknowledging") {
			t.Errorf("rank 0: err = %v", serr)
		}
	})
	t.Run("rank 0 aborts while a rank waits", func(t *testing.T) {
		cfg := Config{NRanks: 3, Timeout: 10 * time.Second}
		w := newLogWatch()
		s, err := Listen(Config{Addr: "127.0.0.1:0", NRanks: 3, Timeout: 10 * time.Second, Logger: slog.New(w)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Serve(ctx, randomID(t)) }()
		cfg.Addr, cfg.Rank = s.Addr(), 1
		got := make(chan error, 1)
		go func() { _, err := ReceiveID(context.Background(), cfg); got <- err }()
		w.waitLog(t, "rank joined")
		cancel()
		if err := wait(t, done); !errors.Is(err, context.Canceled) {
			t.Errorf("rank 0: err = %v, want context.Canceled", err)
		}
		if err := <-got; !errors.Is(err, ErrRejected) {
			t.Errorf("rank 1: err = %v, want rank 0's abort", err)
		}
	})
}

// TestExchangeProcesses runs ranks 1..3 as separate processes (this test
// binary re-executed) against rank 0 in the test, and one process with the
// wrong nranks against another rank 0.
func TestExchangeProcesses(t *testing.T) {
	run := func(addr string, rank, nranks int, token string) *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), helperEnv+"=receive", "RENDEZVOUS_ADDR="+addr, fmt.Sprintf("RENDEZVOUS_RANK=%d", rank),
			fmt.Sprintf("RENDEZVOUS_NRANKS=%d", nranks), "RENDEZVOUS_TOKEN="+token, "RENDEZVOUS_TIMEOUT_MS=20000")
		return cmd
	}
	t.Run("4 ranks", func(t *testing.T) {
		id := randomID(t)
		addr, done := serve(t, Config{NRanks: 4, Token: "proc", Timeout: 30 * time.Second}, id)
		outs := make([][]byte, 4)
		errs := make([]error, 4)
		var wg sync.WaitGroup
		for r := 1; r < 4; r++ {
			wg.Go(func() { outs[r], errs[r] = run(addr, r, 4, "proc").CombinedOutput() })
		}
		wg.Wait()
		if err := wait(t, done); err != nil {
			t.Fatalf("rank 0: %v", err)
		}
		want := hex.EncodeToString(id[:])
		for r := 1; r < 4; r++ {
			if errs[r] != nil || strings.TrimSpace(string(outs[r])) != want {
				t.Errorf("rank %d process: %v\n%s", r, errs[r], outs[r])
			}
		}
	})
	t.Run("wrong nranks", func(t *testing.T) {
		addr, done := serve(t, Config{NRanks: 2, Token: "proc", Timeout: 30 * time.Second}, randomID(t))
		out, err := run(addr, 1, 5, "proc").CombinedOutput()
		if err == nil {
			t.Fatalf("process with nranks 5 succeeded:\n%s", out)
		}
		for _, s := range []string{"rank 1 of 5", addr, "nranks 5"} {
			if !strings.Contains(string(out), s) {
				t.Errorf("process output does not mention %q:\n%s", s, out)
			}
		}
		if serr := wait(t, done); !errors.Is(serr, ErrMismatch) {
			t.Errorf("rank 0: err = %v", serr)
		}
	})
}
