"""What the watermark detector's tests and its command line's tests share: the vector input and a secret key."""

# The input of the vLLM 0.32 test vectors (computed with vllm/v1/watermarking/gumbel.py at v0.32.0).
SEQUENCE = [11, 22, 33, 44, 55, 11, 22, 33, 44, 55, 66, 77, 88, 99, 100]
# A distinctive key so that the "never printed" assertions cannot pass by
# accident (its decimal and hex spellings are both searched for).
SECRET_KEY = 0xC0FFEE_5EC2E7_0042
SECRET_SPELLINGS = (str(SECRET_KEY), f"{SECRET_KEY:x}", f"{SECRET_KEY:X}")
