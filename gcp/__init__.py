"""Google Cloud, the production platform: Confidential Space claims and key-release rules (CEL),
Cloud KMS, Cloud Storage, workload identity federation, the policy writer. Nothing outside this
package names a Google API; the cores reach it through :class:`sealbench.platforms.Platform`,
found by entry point.
"""
