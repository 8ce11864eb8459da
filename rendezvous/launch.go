package rendezvous

import (
	"fmt"
	"net"
	"strconv"
)

// Launch is this process's place in a multi-process job: its rank among
// WorldSize ranks, the GPU it drives (LocalRank, an ordinal on its host)
// and the rendezvous address (rank 0 listens there; Config.Addr).
type Launch struct {
	Rank, WorldSize int
	LocalRank       int
	Addr            string // host:port; empty for a job of one rank
}

// LaunchFlags are a command line's launch options; Rank and WorldSize are
// -1 and Addr is "" when not given. The names, when set, are what errors
// call them (a config file's line, say); "" means --rank, --world-size and
// --rendezvous.
type LaunchFlags struct {
	Rank, WorldSize                   int
	Addr                              string
	RankName, WorldSizeName, AddrName string
}

func orName(name, def string) string {
	if name == "" {
		return def
	}
	return name
}

// The torchrun environment variables ParseLaunch reads.
const (
	EnvRank       = "RANK"
	EnvWorldSize  = "WORLD_SIZE"
	EnvLocalRank  = "LOCAL_RANK"
	EnvMasterAddr = "MASTER_ADDR"
	EnvMasterPort = "MASTER_PORT"
)

// ParseLaunch combines the flags f with the torchrun environment read
// through getenv: --rank over RANK, --world-size over WORLD_SIZE,
// --rendezvous host:port over MASTER_ADDR and MASTER_PORT. Unset, the rank
// is 0, the world size 1 and LocalRank (LOCAL_RANK, which picks the GPU)
// the rank. A value that is not a number, a rank outside the world, a
// world of several ranks without an address, or half an address, is an
// error naming the flag or variable that gave it.
func ParseLaunch(f LaunchFlags, getenv func(string) string) (Launch, error) {
	rank, rankSrc, err := intSetting(f.Rank, orName(f.RankName, "--rank"), EnvRank, getenv, 0)
	if err != nil {
		return Launch{}, err
	}
	world, worldSrc, err := intSetting(f.WorldSize, orName(f.WorldSizeName, "--world-size"), EnvWorldSize, getenv, 1)
	if err != nil {
		return Launch{}, err
	}
	if world < 1 {
		return Launch{}, fmt.Errorf("%s %d: the world size must be at least 1", worldSrc, world)
	}
	if rank < 0 || rank >= world {
		return Launch{}, fmt.Errorf("%s %d is outside the world of %d ranks (%s): want 0..%d", rankSrc, rank, world, worldSrc, world-1)
	}
	local, localSrc, err := intSetting(-1, "", EnvLocalRank, getenv, rank)
	if err != nil {
		return Launch{}, err
	}
	if local < 0 || local > rank {
		return Launch{}, fmt.Errorf("%s %d: want 0..%d (a local rank is at most the rank, %s %d)", localSrc, local, rank, rankSrc, rank)
	}
	addr, err := address(f.Addr, orName(f.AddrName, "--rendezvous"), getenv)
	if err != nil {
		return Launch{}, err
	}
	if world > 1 && addr == "" {
		return Launch{}, fmt.Errorf("%s %d: a job of several ranks needs the rendezvous address: --rendezvous host:port, or %s and %s", worldSrc, world, EnvMasterAddr, EnvMasterPort)
	}
	return Launch{Rank: rank, WorldSize: world, LocalRank: local, Addr: addr}, nil
}

// intSetting returns the flag's value when given (>= 0), else the
// environment variable's, else def, with where it came from.
func intSetting(flagVal int, flagName, env string, getenv func(string) string, def int) (int, string, error) {
	if flagVal >= 0 {
		return flagVal, flagName, nil
	}
	src := env + " (environment)"
	s := getenv(env)
	if s == "" {
		return def, src, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil {
		return 0, src, fmt.Errorf("%s=%q: not an integer", env, s)
	}
	return v, src, nil
}

// address returns the rendezvous host:port from the flag, else from
// MASTER_ADDR and MASTER_PORT, checked.
func address(flagAddr, flagName string, getenv func(string) string) (string, error) {
	if flagAddr != "" {
		host, port, err := net.SplitHostPort(flagAddr)
		if err != nil || host == "" {
			return "", fmt.Errorf("%s %q: want host:port", flagName, flagAddr)
		}
		if err := checkPort(port); err != nil {
			return "", fmt.Errorf("%s %q: %w", flagName, flagAddr, err)
		}
		return flagAddr, nil
	}
	host, port := getenv(EnvMasterAddr), getenv(EnvMasterPort)
	switch {
	case host == "" && port == "":
		return "", nil
	case host == "":
		return "", fmt.Errorf("%s=%s is set but %s is not", EnvMasterPort, port, EnvMasterAddr)
	case port == "":
		return "", fmt.Errorf("%s=%s is set but %s is not", EnvMasterAddr, host, EnvMasterPort)
	}
	if err := checkPort(port); err != nil {
		return "", fmt.Errorf("%s=%q: %w", EnvMasterPort, port, err)
	}
	return net.JoinHostPort(host, port), nil
}

func checkPort(port string) error {
	p, err := strconv.Atoi(port)
	if err != nil || p < 1 || p > 65535 {
		return fmt.Errorf("port %q is not a number in 1..65535", port)
	}
	return nil
}
