package rendezvous

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"
)

// Protocol identifies the rendezvous in every hello; Version is its
// version, checked by rank 0.
const (
	Protocol = "dflash-rendezvous"
	Version  = 1
	// MaxFrame is the largest message accepted, in bytes; anything larger is
	// taken for a peer that does not speak the protocol.
	MaxFrame = 16 << 10
	// DefaultTimeout bounds a rendezvous whose Config.Timeout is zero.
	DefaultTimeout = 5 * time.Minute
	// helloTimeout bounds the wait for a connected peer's hello.
	helloTimeout = 10 * time.Second
	// writeTimeout bounds each message written.
	writeTimeout = 10 * time.Second
)

// UniqueID is the NCCL unique id handed out (cuda.UniqueID has the same
// underlying type, so values assign both ways).
type UniqueID = [128]byte

// Causes matched with errors.Is on a rendezvous *Error.
var (
	ErrTimeout       = errors.New("timed out")
	ErrMismatch      = errors.New("ranks disagree on the job (nranks, rank range or protocol version)")
	ErrRejected      = errors.New("rejected by rank 0")
	ErrDuplicateRank = errors.New("two processes claim the same rank")
	ErrDropped       = errors.New("connection dropped")
)

// Error is a rendezvous failure; it names the coordinator address and the
// rank that reports it.
type Error struct {
	Addr   string // coordinator host:port
	Rank   int    // the rank reporting the error
	NRanks int
	Err    error
}

func (e *Error) Error() string {
	return fmt.Sprintf("rendezvous: rank %d of %d, coordinator %s: %v", e.Rank, e.NRanks, e.Addr, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Config describes one rank's part in a rendezvous.
type Config struct {
	Addr    string        // coordinator host:port: rank 0 listens there, the others connect
	Rank    int           // this process's rank, 0..NRanks-1
	NRanks  int           // ranks in the job
	Token   string        // job token: every rank must give the same one
	Timeout time.Duration // whole rendezvous; 0 means DefaultTimeout
	Logger  *slog.Logger  // nil means slog.Default()
}

func (c Config) check() error {
	if c.NRanks < 1 {
		return fmt.Errorf("rendezvous: nranks %d: want at least 1", c.NRanks)
	}
	if c.Rank < 0 || c.Rank >= c.NRanks {
		return fmt.Errorf("rendezvous: rank %d out of range for %d ranks (want 0..%d)", c.Rank, c.NRanks, c.NRanks-1)
	}
	if c.Addr == "" && c.NRanks > 1 {
		return fmt.Errorf("rendezvous: rank %d of %d: no coordinator address (host:port)", c.Rank, c.NRanks)
	}
	return nil
}

func (c Config) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return DefaultTimeout
}

func (c Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

func (c Config) fail(err error) *Error {
	return &Error{Addr: c.Addr, Rank: c.Rank, NRanks: c.NRanks, Err: err}
}

// Exchange runs the rendezvous for cfg.Rank: rank 0 listens on cfg.Addr,
// makes the id with newID and hands it to every other rank; the others
// connect and receive it. Every rank returns the same id. With one rank
// there is nothing to exchange and newID's id is returned.
func Exchange(ctx context.Context, cfg Config, newID func() (UniqueID, error)) (UniqueID, error) {
	if err := cfg.check(); err != nil {
		return UniqueID{}, err
	}
	if cfg.Rank != 0 {
		return ReceiveID(ctx, cfg)
	}
	var s *Server
	if cfg.NRanks > 1 {
		var err error
		if s, err = Listen(cfg); err != nil {
			return UniqueID{}, err
		}
		defer s.Close()
	}
	id, err := newID()
	if err != nil {
		return UniqueID{}, err
	}
	if s != nil {
		err = s.Serve(ctx, id)
	}
	return id, err
}

// Message kinds and reject codes on the wire.
const (
	msgHello   = "hello"
	msgWelcome = "welcome"
	msgReject  = "reject"
	msgAck     = "ack"

	codeToken     = "token"
	codeMismatch  = "mismatch"
	codeDuplicate = "duplicate"
	codeAborted   = "aborted"
)

// message is every frame's JSON body.
type message struct {
	Type     string `json:"type"`
	Protocol string `json:"protocol,omitempty"`
	Version  int    `json:"version,omitempty"`
	NRanks   int    `json:"nranks"`
	Rank     int    `json:"rank"`
	Token    string `json:"token,omitempty"`
	Session  string `json:"session,omitempty"` // random per ReceiveID call: tells a reconnect from a duplicate
	ID       []byte `json:"id,omitempty"`
	Code     string `json:"code,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// errNotPeer reports a connection that does not speak the protocol.
var errNotPeer = errors.New("not a dflash rendezvous peer")

func writeMsg(c net.Conn, m message) error {
	body, err := json.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("rendezvous: marshal %s message: %v", m.Type, err))
	}
	buf := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[4:], body)
	if err := c.SetWriteDeadline(time.Now().Add(writeTimeout)); err != nil {
		return err
	}
	_, err = c.Write(buf)
	return err
}

func readMsg(c net.Conn) (message, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return message{}, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n == 0 || n > MaxFrame {
		return message{}, fmt.Errorf("%w: frame of %d bytes (limit %d)", errNotPeer, n, MaxFrame)
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(c, body); err != nil {
		return message{}, err
	}
	var m message
	if err := json.Unmarshal(body, &m); err != nil {
		return message{}, fmt.Errorf("%w: %v", errNotPeer, err)
	}
	return m, nil
}

func tokenEqual(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

func newSession() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read does not fail on Linux
	return hex.EncodeToString(b[:])
}

// deadlineErr turns a context's end into ErrTimeout or its cancellation.
func deadlineErr(ctx context.Context, timeout time.Duration) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Errorf("%w after %v", ErrTimeout, timeout)
	}
	return ctx.Err()
}
