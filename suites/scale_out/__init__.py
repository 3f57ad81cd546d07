"""Scale-out routes (render, derender, token generate): served or refused as the profile declares."""
