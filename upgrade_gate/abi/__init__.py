"""Binary compatibility of ROCm library trees and the binaries that load them (`upgrade-gate abi`)."""
