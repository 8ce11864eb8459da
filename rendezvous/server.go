package rendezvous

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"sync"
	"time"
)

// Server is rank 0's side of the rendezvous: it listens on the coordinator
// address and hands the unique id to every other rank.
type Server struct {
	cfg Config
	ln  net.Listener
	log *slog.Logger
}

// Listen starts listening on cfg.Addr for the other ranks; cfg.Rank must be
// 0. A port of 0 picks a free port (see Addr).
func Listen(cfg Config) (*Server, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.Rank != 0 {
		panic(fmt.Sprintf("rendezvous: Listen called by rank %d; only rank 0 listens", cfg.Rank))
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, cfg.fail(fmt.Errorf("listen for the other %d ranks: %w", cfg.NRanks-1, err))
	}
	cfg.Addr = ln.Addr().String()
	return &Server{cfg: cfg, ln: ln, log: cfg.logger().With("rank", 0, "nranks", cfg.NRanks, "coordinator", cfg.Addr)}, nil
}

// Addr returns the address the server listens on.
func (s *Server) Addr() string { return s.cfg.Addr }

// Close stops listening; Serve closes the listener itself when it returns.
func (s *Server) Close() error {
	err := s.ln.Close()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// event is what a connection's reader goroutine reports to Serve's loop:
// a message read, or the error that ended the connection.
type event struct {
	conn net.Conn
	msg  message
	err  error
}

// peer is a rank that has joined.
type peer struct {
	conn    net.Conn
	session string
	acked   bool
}

// Serve waits until every other rank has joined, hands each the id, waits
// for every acknowledgement and returns; it closes the listener and every
// connection before returning. On failure it tells the joined ranks why.
func (s *Server) Serve(ctx context.Context, id UniqueID) error {
	timeout := s.cfg.timeout()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	deadline, _ := ctx.Deadline()
	r := &serveRun{s: s, ctx: ctx, timeout: timeout, deadline: deadline,
		events: make(chan event), conns: make(chan net.Conn),
		open: map[net.Conn]bool{}, retired: map[net.Conn]bool{}, peers: map[int]*peer{}}
	// Deferred calls run bottom-up: close the connections and the listener,
	// cancel (unblocking readers that are reporting), then wait for them.
	defer r.wg.Wait()
	defer cancel()
	defer s.Close()
	defer r.closeOpen()

	r.wg.Add(1)
	go r.accept()
	for {
		if done, err := r.progress(id); done || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return r.expired()
		case c := <-r.conns:
			r.open[c] = true
			_ = c.SetReadDeadline(time.Now().Add(min(helloTimeout, time.Until(deadline))))
			r.wg.Add(1)
			go r.read(c)
		case ev := <-r.events:
			if err := r.handle(ev); err != nil {
				return err
			}
		}
	}
}

// serveRun is the state of one Serve call; only Serve's goroutine touches
// it, except the channels and wg.
type serveRun struct {
	s        *Server
	ctx      context.Context
	timeout  time.Duration
	deadline time.Time
	wg       sync.WaitGroup // the accept loop and the readers
	events   chan event
	conns    chan net.Conn
	open     map[net.Conn]bool
	retired  map[net.Conn]bool // closed on purpose: their end is no news
	peers    map[int]*peer     // by rank
	handed   bool              // the id went out to every rank
}

// accept hands new connections to Serve; it ends when the listener closes.
func (r *serveRun) accept() {
	defer r.wg.Done()
	for {
		c, err := r.s.ln.Accept()
		if err != nil {
			return
		}
		select {
		case r.conns <- c:
		case <-r.ctx.Done():
			c.Close()
			return
		}
	}
}

// read reports c's messages to Serve, one reader per connection for its
// lifetime; it ends with the connection's first error.
func (r *serveRun) read(c net.Conn) {
	defer r.wg.Done()
	for {
		m, err := readMsg(c)
		select {
		case r.events <- event{conn: c, msg: m, err: err}:
		case <-r.ctx.Done():
			return
		}
		if err != nil {
			return
		}
	}
}

func (r *serveRun) closeOpen() {
	for c := range r.open {
		c.Close()
	}
}

// abort tells every joined rank why the rendezvous ends.
func (r *serveRun) abort(code, reason string) {
	for _, p := range r.peers {
		_ = writeMsg(p.conn, message{Type: msgReject, Code: code, Reason: reason})
	}
}

// progress hands the id out once every other rank has joined, and reports
// done once every rank has acknowledged it.
func (r *serveRun) progress(id UniqueID) (done bool, err error) {
	cfg := r.s.cfg
	if !r.handed && len(r.peers) == cfg.NRanks-1 {
		for rank, p := range r.peers {
			if err := writeMsg(p.conn, message{Type: msgWelcome, NRanks: cfg.NRanks, Rank: rank, ID: id[:]}); err != nil {
				return false, cfg.fail(fmt.Errorf("%w: hand the id to rank %d: %v", ErrDropped, rank, err))
			}
		}
		r.handed = true
		r.s.log.Debug("rendezvous: id handed out", "ranks", cfg.NRanks)
	}
	if r.handed && allAcked(r.peers) {
		r.s.log.Info("rendezvous complete", "ranks", cfg.NRanks)
		return true, nil
	}
	return false, nil
}

// expired is Serve's error when the timeout or the caller's context ends it.
func (r *serveRun) expired() error {
	cfg := r.s.cfg
	err := deadlineErr(r.ctx, r.timeout)
	if r.handed {
		return cfg.fail(fmt.Errorf("%w waiting for ranks %v to acknowledge the id", err, missing(r.peers, cfg.NRanks, true)))
	}
	err = fmt.Errorf("%w waiting for ranks %v to join (joined: %v)", err, missing(r.peers, cfg.NRanks, false), joined(r.peers))
	r.abort(codeAborted, "rank 0 gave up: "+err.Error())
	return cfg.fail(err)
}

// handle acts on one connection event; an error ends the rendezvous.
func (r *serveRun) handle(ev event) error {
	cfg, log := r.s.cfg, r.s.log
	rank, p := findPeer(r.peers, ev.conn)
	switch {
	case p != nil && ev.err != nil: // a joined rank's connection ended
		delete(r.open, ev.conn)
		ev.conn.Close()
		if r.handed && !p.acked {
			return cfg.fail(fmt.Errorf("%w: rank %d (%s) closed its connection before acknowledging the id: %v",
				ErrDropped, rank, ev.conn.RemoteAddr(), ev.err))
		}
		if !r.handed {
			delete(r.peers, rank)
			log.Warn("rendezvous: rank dropped before the id was handed out; waiting for it to connect again",
				"peer_rank", rank, "remote", ev.conn.RemoteAddr(), "err", ev.err)
		}
	case p != nil: // a frame from a joined rank: only an ack after the id is valid
		if !r.handed || ev.msg.Type != msgAck {
			r.abort(codeAborted, fmt.Sprintf("rank 0 gave up: unexpected %q message from rank %d", ev.msg.Type, rank))
			return cfg.fail(fmt.Errorf("%w: unexpected %q message from rank %d", ErrMismatch, ev.msg.Type, rank))
		}
		p.acked = true
	case ev.err != nil: // a connection that never joined ended
		delete(r.open, ev.conn)
		ev.conn.Close()
		if r.retired[ev.conn] {
			delete(r.retired, ev.conn)
			return nil
		}
		log.Warn("rendezvous: dropped a connection that never said hello", "remote", ev.conn.RemoteAddr(), "err", ev.err)
	case r.retired[ev.conn]:
	default:
		if err := r.s.hello(ev.conn, ev.msg, r.peers, r.handed, r.retired); err != nil {
			r.abort(codeAborted, "rank 0 gave up: "+err.Error())
			return cfg.fail(err)
		}
	}
	return nil
}

// hello handles a hello from a connection that has not joined; it returns
// an error only for a fault that ends the rendezvous.
func (s *Server) hello(c net.Conn, m message, peers map[int]*peer, handed bool, retired map[net.Conn]bool) error {
	reject := func(code, reason string) {
		_ = writeMsg(c, message{Type: msgReject, Code: code, Reason: reason})
	}
	retire := func(c net.Conn) {
		retired[c] = true
		c.Close()
	}
	remote := c.RemoteAddr()
	switch {
	case m.Type != msgHello || m.Protocol != Protocol:
		s.log.Warn("rendezvous: ignoring a peer that does not speak the protocol", "remote", remote, "type", m.Type, "protocol", m.Protocol)
		retire(c)
		return nil
	case !tokenEqual(m.Token, s.cfg.Token):
		s.log.Warn("rendezvous: rejected a hello with another job token", "remote", remote, "peer_rank", m.Rank)
		reject(codeToken, "job token differs from rank 0's")
		retire(c)
		return nil
	case m.Version != Version:
		reason := fmt.Sprintf("protocol version %d, rank 0 speaks %d", m.Version, Version)
		reject(codeMismatch, reason)
		return fmt.Errorf("%w: rank %d (%s): %s", ErrMismatch, m.Rank, remote, reason)
	case m.NRanks != s.cfg.NRanks:
		reason := fmt.Sprintf("rank %d says nranks %d, rank 0 says %d", m.Rank, m.NRanks, s.cfg.NRanks)
		reject(codeMismatch, reason)
		return fmt.Errorf("%w: %s (%s)", ErrMismatch, reason, remote)
	case m.Rank < 1 || m.Rank >= s.cfg.NRanks:
		reason := fmt.Sprintf("rank %d out of range 1..%d", m.Rank, s.cfg.NRanks-1)
		reject(codeMismatch, reason)
		return fmt.Errorf("%w: %s (%s)", ErrMismatch, reason, remote)
	case handed:
		reason := fmt.Sprintf("rank %d joined after the id was handed out", m.Rank)
		reject(codeDuplicate, reason)
		return fmt.Errorf("%w: %s (%s)", ErrDuplicateRank, reason, remote)
	}
	if old := peers[m.Rank]; old != nil {
		if old.session != m.Session {
			reason := fmt.Sprintf("rank %d joined from %s and again from %s", m.Rank, old.conn.RemoteAddr(), remote)
			reject(codeDuplicate, reason)
			return fmt.Errorf("%w: %s", ErrDuplicateRank, reason)
		}
		// The same process connected again before its old connection's end
		// reached us: keep the new one.
		retire(old.conn)
	}
	// No read deadline for a joined rank: Serve's own deadline ends the
	// wait, and closing the connection ends its reader.
	_ = c.SetReadDeadline(time.Time{})
	peers[m.Rank] = &peer{conn: c, session: m.Session}
	s.log.Debug("rendezvous: rank joined", "peer_rank", m.Rank, "remote", remote, "joined", len(peers)+1)
	return nil
}

func findPeer(peers map[int]*peer, c net.Conn) (int, *peer) {
	for r, p := range peers {
		if p.conn == c {
			return r, p
		}
	}
	return -1, nil
}

func allAcked(peers map[int]*peer) bool {
	for _, p := range peers {
		if !p.acked {
			return false
		}
	}
	return true
}

// missing lists the ranks 1..nranks-1 that have not joined (or, with
// acks, not acknowledged).
func missing(peers map[int]*peer, nranks int, acks bool) []int {
	var out []int
	for r := 1; r < nranks; r++ {
		p := peers[r]
		if p == nil || (acks && !p.acked) {
			out = append(out, r)
		}
	}
	return out
}

func joined(peers map[int]*peer) []int {
	out := []int{0}
	for r := range peers {
		out = append(out, r)
	}
	sort.Ints(out)
	return out
}
