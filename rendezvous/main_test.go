package rendezvous

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"
)

// helperEnv, when set, turns the test binary into a helper process:
// "receive" runs ReceiveID with the configuration in the RENDEZVOUS_* variables
// and prints the id in hex.
const helperEnv = "DFLASH_RENDEZVOUS_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "receive":
		atoi := func(k string) int {
			n, err := strconv.Atoi(os.Getenv(k))
			if err != nil {
				fmt.Fprintf(os.Stderr, "helper: %s: %v\n", k, err)
				os.Exit(2)
			}
			return n
		}
		cfg := Config{Addr: os.Getenv("RENDEZVOUS_ADDR"), Rank: atoi("RENDEZVOUS_RANK"), NRanks: atoi("RENDEZVOUS_NRANKS"),
			Token: os.Getenv("RENDEZVOUS_TOKEN"), Timeout: time.Duration(atoi("RENDEZVOUS_TIMEOUT_MS")) * time.Millisecond}
		id, err := ReceiveID(context.Background(), cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Println(hex.EncodeToString(id[:]))
		os.Exit(0)
	default:
		fmt.Fprintf(os.Stderr, "unknown %s=%q\n", helperEnv, os.Getenv(helperEnv))
		os.Exit(2)
	}
}
