"""Every answer has OpenAI's shape and every stream is framed as OpenAI clients parse it, through an ingress too."""
