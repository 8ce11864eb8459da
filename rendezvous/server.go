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
	// Deferred calls run bottom-up: close the connections and the listener,
	// cancel (unblocking readers that are reporting), then wait for them.
	var wg sync.WaitGroup
	defer wg.Wait()
	timeout := s.cfg.timeout()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	deadline, _ := ctx.Deadline()
	defer s.Close()

	events := make(chan event)
	conns := make(chan net.Conn)

	wg.Add(1)
	go func() { // accept loop; ends when the listener closes
		defer wg.Done()
		for {
			c, err := s.ln.Accept()
			if err != nil {
				return
			}
			select {
			case conns <- c:
			case <-ctx.Done():
				c.Close()
				return
			}
		}
	}()

	open := map[net.Conn]bool{}
	retired := map[net.Conn]bool{} // closed on purpose: their end is no news
	defer func() {
		for c := range open {
			c.Close()
		}
	}()
	read := func(c net.Conn) { // one reader per connection, for its lifetime
		defer wg.Done()
		for {
			m, err := readMsg(c)
			select {
			case events <- event{conn: c, msg: m, err: err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}

	peers := map[int]*peer{} // by rank
	handed := false
	abort := func(code, reason string) {
		for _, p := range peers {
			_ = writeMsg(p.conn, message{Type: msgReject, Code: code, Reason: reason})
		}
	}
	for {
		if !handed && len(peers) == s.cfg.NRanks-1 {
			for r, p := range peers {
				if err := writeMsg(p.conn, message{Type: msgWelcome, NRanks: s.cfg.NRanks, Rank: r, ID: id[:]}); err != nil {
					return s.cfg.fail(fmt.Errorf("%w: hand the id to rank %d: %v", ErrDropped, r, err))
				}
			}
			handed = true
			s.log.Debug("rendezvous: id handed out", "ranks", s.cfg.NRanks)
		}
		if handed && allAcked(peers) {
			s.log.Info("rendezvous complete", "ranks", s.cfg.NRanks)
			return nil
		}
		select {
		case <-ctx.Done():
			err := deadlineErr(ctx, timeout)
			if handed {
				return s.cfg.fail(fmt.Errorf("%w waiting for ranks %v to acknowledge the id", err, missing(peers, s.cfg.NRanks, true)))
			}
			err = fmt.Errorf("%w waiting for ranks %v to join (joined: %v)", err, missing(peers, s.cfg.NRanks, false), joined(peers))
			abort(codeAborted, "rank 0 gave up: "+err.Error())
			return s.cfg.fail(err)
		case c := <-conns:
			open[c] = true
			_ = c.SetReadDeadline(time.Now().Add(min(helloTimeout, time.Until(deadline))))
			wg.Add(1)
			go read(c)
		case ev := <-events:
			rank, p := findPeer(peers, ev.conn)
			switch {
			case p != nil && ev.err != nil: // a joined rank's connection ended
				delete(open, ev.conn)
				ev.conn.Close()
				if handed && !p.acked {
					return s.cfg.fail(fmt.Errorf("%w: rank %d (%s) closed its connection before acknowledging the id: %v",
						ErrDropped, rank, ev.conn.RemoteAddr(), ev.err))
				}
				if !handed {
					delete(peers, rank)
					s.log.Warn("rendezvous: rank dropped before the id was handed out; waiting for it to connect again",
						"peer_rank", rank, "remote", ev.conn.RemoteAddr(), "err", ev.err)
				}
			case p != nil: // a frame from a joined rank: only an ack after the id is valid
				if !handed || ev.msg.Type != msgAck {
					abort(codeAborted, fmt.Sprintf("rank 0 gave up: unexpected %q message from rank %d", ev.msg.Type, rank))
					return s.cfg.fail(fmt.Errorf("%w: unexpected %q message from rank %d", ErrMismatch, ev.msg.Type, rank))
				}
				p.acked = true
			case ev.err != nil: // a connection that never joined ended
				delete(open, ev.conn)
				ev.conn.Close()
				if retired[ev.conn] {
					delete(retired, ev.conn)
					continue
				}
				s.log.Warn("rendezvous: dropped a connection that never said hello", "remote", ev.conn.RemoteAddr(), "err", ev.err)
			case retired[ev.conn]:
			default:
				if err := s.hello(ev.conn, ev.msg, peers, handed, retired); err != nil {
					abort(codeAborted, "rank 0 gave up: "+err.Error())
					return s.cfg.fail(err)
				}
			}
		}
	}
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
